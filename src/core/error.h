// Per-request and per-load failures are values: an Error with a code the daemon can put on the
// wire and a message a person can act on. API failures (CUDA, NCCL) and broken invariants are not
// Errors; see check.h.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tandem {

enum class ErrorCode {
  kInvalidArgument,  // a request or flag value that can never work
  kInvalidModel,     // a model directory that is broken or inconsistent
  kUnsupported,      // valid input tandem does not run (yet): names the field
  kNotFound,         // a file, tensor, request id that does not exist
  kIo,               // the OS refused (open, mmap, read, write)
  kTokenizer,        // tokenizer.json / tokenizer_config.json problems
  kTemplate,         // chat template parse or render failure
  kPromptTooLong,    // prompt + max_tokens over max_model_len
  kOverloaded,       // queue full; try again later
  kOutOfPages,       // KV pool cannot ever hold the request
  kCancelled,        // the client cancelled or vanished
  kTransport,        // KV shipping failed or timed out
  kTimeout,          // a lease ran out
  kProtocol,         // a malformed frame
  kInternal,         // a bug; the message says where
};

std::string_view error_code_name(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;

  std::string to_string() const;
};

inline Error make_error(ErrorCode code, std::string message) {
  return Error{code, std::move(message)};
}

// Result<T>: a value or an Error. C++20 has no std::expected; this is the small part of it we use.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design, like std::expected
  Result(Error error) : v_(std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const { return std::get<1>(v_); }
  Error take_error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

// Status: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT

  static Status Ok() { return Status(); }
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace tandem

// Propagate an Error out of a function returning Result<...> or Status.
#define TANDEM_TRY(expr)                                           \
  do {                                                             \
    auto&& tandem_try_value_ = (expr);                             \
    if (!tandem_try_value_.ok()) return tandem_try_value_.error(); \
  } while (0)

#define TANDEM_CONCAT_INNER_(a, b) a##b
#define TANDEM_CONCAT_(a, b) TANDEM_CONCAT_INNER_(a, b)
// TANDEM_ASSIGN_OR_RETURN(auto x, f()); assigns the value or returns the Error.
#define TANDEM_ASSIGN_OR_RETURN(lhs, expr)                                \
  auto TANDEM_CONCAT_(tandem_res_, __LINE__) = (expr);                    \
  if (!TANDEM_CONCAT_(tandem_res_, __LINE__).ok())                        \
    return std::move(TANDEM_CONCAT_(tandem_res_, __LINE__)).take_error(); \
  lhs = std::move(TANDEM_CONCAT_(tandem_res_, __LINE__)).value()
