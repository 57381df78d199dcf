#include "core/check.h"

#include <cstdarg>

namespace tandem::detail {

void check_failed(const char* file, int line, const char* cond) {
  std::fprintf(stderr, "tandem: check failed at %s:%d: %s\n", file, line, cond);
  std::abort();
}

void check_failed(const char* file, int line, const char* cond, const char* fmt, ...) {
  std::fprintf(stderr, "tandem: check failed at %s:%d: %s: ", file, line, cond);
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::abort();
}

}  // namespace tandem::detail
