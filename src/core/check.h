// Invariants: a failed check is a bug in tandem, never a consequence of client input. It prints
// where and why, then aborts (the daemon is restarted by systemd).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace tandem::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond);
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
}  // namespace tandem::detail

#define TANDEM_CHECK(cond, ...)                                                             \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::tandem::detail::check_failed(__FILE__, __LINE__, #cond __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)
