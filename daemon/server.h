// The tandemd server: one libuv loop thread owns the listening socket, every client connection,
// the signal handlers and the timers. The engine's worker thread hands token and finish events
// back through a mutex-guarded queue and a uv_async_t; nothing on the loop blocks.
//
// Lifecycle: start() listens; SIGTERM/SIGINT (or begin_shutdown) stop accepting, let in-flight
// requests finish for up to shutdown_timeout, cancel the rest (they end with Finished{abort}),
// flush every connection and close every handle, so uv_run returns and uv_loop_close succeeds.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <uv.h>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/frontend.h"
#include "messages.h"
#include "metrics_http.h"

namespace tandem::daemon {

// Turns a prompt into ids (tokenizer + chat template); the daemon binary binds the engine's.
using PromptBuilder = std::function<Result<std::vector<int32_t>>(const PromptInput&)>;
// Receives sd_notify lines ("WATCHDOG=1", "STATUS=...", "STOPPING=1"); a no-op outside systemd.
using Notifier = std::function<void(const std::string&)>;

struct ServerOptions {
  std::string socket_path;
  int listen_fd = -1;  // from socket activation; else socket_path is bound
  int32_t max_connections = 256;
  uint32_t max_frame_bytes = 4u << 20;
  int32_t max_requests_per_connection = 256;
  int64_t max_output_buffer_bytes = 1 << 20;
  double shutdown_timeout_s = 30;
  std::string model_name;
  int32_t default_max_tokens = 16;    // when a request leaves max_tokens unset
  uint64_t watchdog_interval_ms = 0;  // 0 = no watchdog pings
  std::string metrics_listen;         // HOST:PORT of the HTTP /metrics endpoint; empty = off
};

struct Connection;
struct InFlight;
class EventQueue;

class Server {
 public:
  Server(uv_loop_t* loop, Engine& engine, PromptBuilder prompts, Notifier notify,
         ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds (or adopts listen_fd), listens, installs signal handlers. Errors name the socket.
  Status start();
  // What SIGTERM does; a second call aborts every in-flight request at once.
  void begin_shutdown();

  int32_t connections() const { return num_connections_; }
  // The bound port of --metrics-listen (0 when off); useful with port 0.
  int metrics_port() const { return metrics_http_ ? metrics_http_->port() : 0; }
  size_t requests_in_flight() const { return in_flight_.size(); }

 private:
  static void on_connection(uv_stream_t* listener, int status);
  static void on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);
  static void on_written(uv_write_t* req, int status);
  static void on_signal(uv_signal_t* handle, int signum);
  static void on_events(uv_async_t* handle);
  static void on_drain_timeout(uv_timer_t* handle);
  static void on_watchdog(uv_timer_t* handle);

  void accept_one();
  void start_reading(Connection& conn);
  void write_frame(Connection& conn, Frame frame);
  void read_frames(Connection& conn);
  void protocol_error(Connection& conn, uint64_t id, const Error& error);  // replies, closes
  void disconnect(Connection& conn);  // the client is gone: cancel, close now
  void output_drained(Connection& conn);
  void handle_frame(Connection& conn, const wire::Request& request);
  void handle_generate(Connection& conn, uint64_t id, const wire::GenerateRequest& request);
  void deliver_events();
  void flush_pending(InFlight& request);
  void connection_closed(Connection& conn);  // cancels its requests; they stay until finished
  void maybe_finish_shutdown();
  void abort_all();
  DaemonStatus daemon_status() const;
  std::string metrics_text() const;

  uv_loop_t* loop_;
  Engine& engine_;
  PromptBuilder prompts_;
  Notifier notify_;
  ServerOptions options_;

  uv_pipe_t listener_{};
  bool bound_path_ = false;  // we created socket_path and unlink it at exit
  uv_signal_t sigterm_{}, sigint_{};
  uv_timer_t drain_timer_{}, watchdog_timer_{};
  uv_async_t events_async_{};
  std::shared_ptr<EventQueue> events_;
  std::unique_ptr<MetricsHttp> metrics_http_;  // --metrics-listen

  std::vector<Connection*> connection_list_;  // owned; freed in their close callbacks
  int32_t num_connections_ = 0;
  std::unordered_map<uint64_t, std::unique_ptr<InFlight>> in_flight_;  // by engine request id
  uint64_t next_request_id_ = 1;
  uint64_t next_connection_id_ = 1;

  bool draining_ = false;
  bool aborting_ = false;
  bool closing_ = false;
  uint64_t start_ms_ = 0;

  // Counters for metrics and the watchdog.
  uint64_t events_delivered_ = 0;
  uint64_t watchdog_last_events_ = 0;
  uint64_t tokens_generated_ = 0;
  uint64_t requests_accepted_ = 0;
  uint64_t requests_rejected_ = 0;
  uint64_t connections_total_ = 0;
  uint64_t protocol_errors_ = 0;
};

}  // namespace tandem::daemon
