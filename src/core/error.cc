#include "core/error.h"

namespace tandem {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kInvalidModel:
      return "invalid_model";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kTokenizer:
      return "tokenizer";
    case ErrorCode::kTemplate:
      return "template";
    case ErrorCode::kPromptTooLong:
      return "prompt_too_long";
    case ErrorCode::kOverloaded:
      return "overloaded";
    case ErrorCode::kOutOfPages:
      return "out_of_pages";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kTransport:
      return "transport";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kProtocol:
      return "protocol";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string Error::to_string() const {
  return std::string(error_code_name(code)) + ": " + message;
}

}  // namespace tandem
