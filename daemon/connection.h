// Server internals: one client connection, one request in flight, and the queue that carries
// engine events from the worker thread to the loop. Only server.cc includes this.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include <uv.h>

#include "engine/events.h"
#include "frame.h"
#include "trace/trace.h"

namespace tandem::daemon {

class Server;

// Engine events on their way to the loop thread. push() runs on the engine's worker thread.
class EventQueue {
 public:
  using Event = std::variant<TokenEvent, FinishEvent>;
  explicit EventQueue(uv_async_t* async) : async_(async) {}

  void push(Event event) {
    // uv_async_send under the lock: close() takes the lock too, so no send can race the
    // handle's uv_close.
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    events_.push_back(std::move(event));
    uv_async_send(async_);
  }
  std::vector<Event> take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(events_, {});
  }
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }

 private:
  std::mutex mu_;
  uv_async_t* async_;
  bool closed_ = false;
  std::vector<Event> events_;
};

// The engine's observer for one request: forwards events to the loop and never blocks.
class RequestObserver final : public EngineObserver {
 public:
  explicit RequestObserver(std::shared_ptr<EventQueue> queue) : queue_(std::move(queue)) {}
  void on_tokens(TokenEvent event) override { queue_->push(std::move(event)); }
  void on_finished(FinishEvent event) override {
    // The loop may destroy this observer as soon as the event is queued; touch no member after.
    std::shared_ptr<EventQueue> queue = queue_;
    queue->push(std::move(event));
  }

 private:
  std::shared_ptr<EventQueue> queue_;
};

struct Connection;

struct InFlight {
  uint64_t engine_id = 0;
  uint64_t client_id = 0;
  Connection* conn = nullptr;  // null once the client is gone
  bool stream = true;
  RequestObserver observer;
  // Tokens not written yet: the whole output when !stream, else what piled up while the
  // connection was over its output limit (coalesced into one TokenEvent).
  std::vector<int32_t> pending_ids;
  std::string pending_text;
  // Daemon-side spans (tokenize, stream_write), handed to the engine's trace after Finished.
  std::vector<Span> spans;

  explicit InFlight(std::shared_ptr<EventQueue> q) : observer(std::move(q)) {}
};

struct Connection {
  uv_pipe_t pipe{};
  Server* server = nullptr;
  uint64_t id = 0;
  FrameReader reader;
  std::unordered_map<uint64_t, uint64_t> requests;  // client request id -> engine request id
  int64_t queued_bytes = 0;                         // written to libuv, not yet on the socket
  bool reading = false;
  bool closing = false;
  bool counted = false;  // counts toward max_connections
  pid_t peer_pid = 0;
  uid_t peer_uid = 0;
  gid_t peer_gid = 0;

  explicit Connection(uint32_t max_frame_bytes) : reader(max_frame_bytes) {}
};

}  // namespace tandem::daemon
