// A blocking client of tandemd for the CLI, tests and benchmarks: one Unix socket, frames out,
// verified frames in. Not thread-safe; use one Client per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "messages.h"

namespace tandem::daemon {

// A verified reply and the bytes it lives in.
struct ReplyFrame {
  std::vector<uint8_t> bytes;  // the frame, size prefix included
  const wire::Reply* reply = nullptr;
};

class Client {
 public:
  static Result<Client> connect(const std::string& socket_path);
  Client(Client&& other) noexcept;
  Client& operator=(Client&& other) noexcept;
  ~Client();

  Status send(const Frame& frame);
  // The next reply; timeout_ms < 0 waits forever. kTimeout when none came in time, kIo when the
  // daemon closed the connection.
  Result<ReplyFrame> receive(int timeout_ms = -1);
  int fd() const { return fd_; }

 private:
  explicit Client(int fd) : fd_(fd) {}
  int fd_ = -1;
  uint32_t max_frame_bytes_ = 64u << 20;  // replies carry metrics and traces
};

struct GenerateResult {
  int32_t prompt_tokens = 0;
  uint64_t trace_id = 0;  // selects this request in query_trace
  std::vector<int32_t> ids;
  std::string text;
  FinishEvent finished;
};

struct GenerateOptions {
  bool stream = true;
  bool max_tokens_set = true;
  std::function<void(const std::string&)> on_text;  // every text delta, as it arrives
  std::function<void(size_t)> on_ids;  // every token event with ids, as it arrives (benchmarks)
};

// Sends one Generate and reads until its Finished (other replies are an error here). An Error
// reply becomes the returned Error.
Result<GenerateResult> generate(Client& client, uint64_t id, const PromptInput& prompt,
                                const SamplingParams& sampling, const GenerateOptions& options);

Result<DaemonStatus> query_status(Client& client);
Result<std::string> query_metrics(Client& client);
// Chrome trace JSON: one request (GenerateResult::trace_id), or the last `last_n` (0 = all kept).
Result<std::string> query_trace(Client& client, std::optional<uint64_t> trace_id, uint32_t last_n);
struct Health {
  bool ok = false;
  std::string state;
};
Result<Health> query_health(Client& client, int timeout_ms);

}  // namespace tandem::daemon
