// Only linked while src/engine/engine.cc (which defines finish_reason_name) is not compiled yet:
// request_flags.cc's JSON needs the name.
#include "engine/events.h"

namespace tandem {
const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}
}  // namespace tandem
