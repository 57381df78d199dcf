#include "server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include <spdlog/spdlog.h>

#include "connection.h"
#include "core/check.h"

namespace tandem::daemon {

namespace {

constexpr size_t kReadChunk = 64 * 1024;

struct WriteRequest {
  uv_write_t req{};
  Frame frame;
  Connection* conn = nullptr;
};

uv_stream_t* stream_of(Connection& c) {
  return reinterpret_cast<uv_stream_t*>(&c.pipe);
}
uv_handle_t* handle_of(Connection& c) {
  return reinterpret_cast<uv_handle_t*>(&c.pipe);
}

void on_alloc(uv_handle_t*, size_t, uv_buf_t* buf) {
  // One chunk per read callback; FrameReader copies what it keeps. The loop is one thread.
  static char chunk[kReadChunk];
  *buf = uv_buf_init(chunk, sizeof(chunk));
}

void on_closed(uv_handle_t* handle) {
  delete static_cast<Connection*>(handle->data);
}

void close_now(Connection& conn) {
  conn.closing = true;
  if (uv_is_closing(handle_of(conn))) return;
  uv_close(handle_of(conn), on_closed);
}

void on_shutdown(uv_shutdown_t* req, int) {
  Connection* conn = static_cast<Connection*>(req->data);
  delete req;
  close_now(*conn);
}

// Flushes what is queued, then closes: an Error frame reaches the client before the close.
void close_after_flush(Connection& conn) {
  if (conn.closing) return;
  conn.closing = true;
  uv_read_stop(stream_of(conn));
  conn.reading = false;
  auto* req = new uv_shutdown_t;
  req->data = &conn;
  if (uv_shutdown(req, stream_of(conn), on_shutdown) != 0) {
    delete req;
    close_now(conn);
  }
}

void close_handle(uv_handle_t* h) {
  if (!uv_is_closing(h)) uv_close(h, nullptr);
}

}  // namespace

Server::Server(uv_loop_t* loop, Engine& engine, PromptBuilder prompts, Notifier notify,
               ServerOptions options)
    : loop_(loop),
      engine_(engine),
      prompts_(std::move(prompts)),
      notify_(std::move(notify)),
      options_(std::move(options)) {}

Server::~Server() {
  TANDEM_CHECK(in_flight_.empty(), "Server destroyed with %zu requests in flight",
               in_flight_.size());
  if (bound_path_) unlink(options_.socket_path.c_str());
}

Status Server::start() {
  start_ms_ = uv_now(loop_);
  auto uv_fail = [&](const char* what, int rc) {
    return make_error(ErrorCode::kIo,
                      std::string(what) + " " + options_.socket_path + ": " + uv_strerror(rc));
  };
  events_async_.data = this;
  uv_async_init(loop_, &events_async_, on_events);
  events_ = std::make_shared<EventQueue>(&events_async_);
  uv_signal_init(loop_, &sigterm_);
  uv_signal_init(loop_, &sigint_);
  sigterm_.data = sigint_.data = this;
  uv_timer_init(loop_, &drain_timer_);
  uv_timer_init(loop_, &watchdog_timer_);
  drain_timer_.data = watchdog_timer_.data = this;
  uv_pipe_init(loop_, &listener_, 0);
  listener_.data = this;

  int rc = 0;
  if (options_.listen_fd >= 0) {
    rc = uv_pipe_open(&listener_, options_.listen_fd);
    if (rc != 0) return uv_fail("adopting the activated socket for", rc);
  } else {
    // A socket file left by a crashed daemon blocks bind; anything else at the path is kept.
    struct stat st {};
    if (lstat(options_.socket_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
      unlink(options_.socket_path.c_str());
    }
    rc = uv_pipe_bind(&listener_, options_.socket_path.c_str());
    if (rc != 0) return uv_fail("binding", rc);
    bound_path_ = true;
    if (chmod(options_.socket_path.c_str(), 0660) != 0) {
      return make_error(ErrorCode::kIo,
                        "chmod 0660 " + options_.socket_path + ": " + std::strerror(errno));
    }
  }
  rc = uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), 128, on_connection);
  if (rc != 0) return uv_fail("listening on", rc);

  if (!options_.metrics_listen.empty()) {
    metrics_http_ = std::make_unique<MetricsHttp>(loop_, [this] { return metrics_text(); });
    Status st = metrics_http_->start(options_.metrics_listen);
    if (!st) {
      metrics_http_->close();
      return st;
    }
  }
  uv_signal_start(&sigterm_, on_signal, SIGTERM);
  uv_signal_start(&sigint_, on_signal, SIGINT);
  if (options_.watchdog_interval_ms > 0) {
    uv_timer_start(&watchdog_timer_, on_watchdog, options_.watchdog_interval_ms,
                   options_.watchdog_interval_ms);
  }
  spdlog::info("listening on {}{}", options_.socket_path,
               options_.listen_fd >= 0 ? " (socket activation)" : "");
  return Status::Ok();
}

// ---- connections ----

void Server::on_connection(uv_stream_t* listener, int status) {
  Server* self = static_cast<Server*>(listener->data);
  if (status < 0) {
    spdlog::warn("accept: {}", uv_strerror(status));
    return;
  }
  self->accept_one();
}

void Server::accept_one() {
  auto* conn = new Connection(options_.max_frame_bytes);
  conn->server = this;
  conn->id = next_connection_id_++;
  uv_pipe_init(loop_, &conn->pipe, 0);
  conn->pipe.data = conn;
  if (uv_accept(reinterpret_cast<uv_stream_t*>(&listener_), stream_of(*conn)) != 0) {
    close_now(*conn);
    return;
  }
  uv_os_fd_t fd = -1;
  if (uv_fileno(handle_of(*conn), &fd) == 0) {
    struct ucred cred {};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
      conn->peer_pid = cred.pid;
      conn->peer_uid = cred.uid;
      conn->peer_gid = cred.gid;
    }
  }
  ++connections_total_;
  if (num_connections_ >= options_.max_connections || draining_) {
    const char* why = draining_ ? "tandemd is shutting down" : "connection limit reached";
    spdlog::warn("connection {} from pid {} uid {} refused: {}", conn->id, conn->peer_pid,
                 conn->peer_uid, why);
    write_frame(*conn, encode_error(0, make_error(ErrorCode::kOverloaded, why)));
    close_after_flush(*conn);
    return;
  }
  conn->counted = true;
  ++num_connections_;
  connection_list_.push_back(conn);
  spdlog::info("connection {} opened: pid {} uid {} gid {}", conn->id, conn->peer_pid,
               conn->peer_uid, conn->peer_gid);
  start_reading(*conn);
}

void Server::start_reading(Connection& conn) {
  if (conn.reading || conn.closing) return;
  if (uv_read_start(stream_of(conn), on_alloc, on_read) == 0) conn.reading = true;
}

void Server::connection_closed(Connection& conn) {
  if (!conn.counted) return;
  conn.counted = false;
  --num_connections_;
  connection_list_.erase(std::find(connection_list_.begin(), connection_list_.end(), &conn));
  // A vanished client's requests are aborted wherever they are; the engine frees their pages
  // and their events are dropped when they arrive.
  for (const auto& [client_id, engine_id] : conn.requests) {
    auto it = in_flight_.find(engine_id);
    if (it != in_flight_.end()) it->second->conn = nullptr;
    engine_.cancel(engine_id);
  }
  if (!conn.requests.empty()) {
    spdlog::info("connection {} gone with {} requests in flight: cancelled", conn.id,
                 conn.requests.size());
  } else {
    spdlog::debug("connection {} closed", conn.id);
  }
  conn.requests.clear();
  maybe_finish_shutdown();
}

void Server::disconnect(Connection& conn) {
  connection_closed(conn);
  close_now(conn);
}

void Server::protocol_error(Connection& conn, uint64_t id, const Error& error) {
  ++protocol_errors_;
  spdlog::warn("connection {} (pid {}): {}; closing", conn.id, conn.peer_pid, error.message);
  write_frame(conn, encode_error(id, error));
  connection_closed(conn);
  close_after_flush(conn);
}

// ---- writing, with per-connection backpressure ----

void Server::write_frame(Connection& conn, Frame frame) {
  if (conn.closing) return;
  auto* w = new WriteRequest;
  w->frame = std::move(frame);
  w->conn = &conn;
  w->req.data = w;
  uv_buf_t buf = uv_buf_init(reinterpret_cast<char*>(w->frame.data()), unsigned(w->frame.size()));
  conn.queued_bytes += int64_t(w->frame.size());
  const int rc = uv_write(&w->req, stream_of(conn), &buf, 1, on_written);
  if (rc != 0) {
    conn.queued_bytes -= int64_t(w->frame.size());
    delete w;
    spdlog::debug("connection {}: write: {}", conn.id, uv_strerror(rc));
    disconnect(conn);
    return;
  }
  // A client that does not read is not read either: its requests cannot pile up replies.
  if (conn.queued_bytes > options_.max_output_buffer_bytes && conn.reading) {
    uv_read_stop(stream_of(conn));
    conn.reading = false;
  }
}

void Server::on_written(uv_write_t* req, int status) {
  auto* w = static_cast<WriteRequest*>(req->data);
  Connection& conn = *w->conn;
  conn.queued_bytes -= int64_t(w->frame.size());
  delete w;
  if (status == UV_ECANCELED) return;  // the handle is closing
  if (status < 0) {
    spdlog::debug("connection {}: write: {}", conn.id, uv_strerror(status));
    conn.server->disconnect(conn);
    return;
  }
  conn.server->output_drained(conn);
}

void Server::output_drained(Connection& conn) {
  // Resume below half the limit, so a slow reader is not toggled on every frame.
  if (conn.closing || conn.queued_bytes > options_.max_output_buffer_bytes / 2) return;
  for (const auto& [client_id, engine_id] : conn.requests) {
    auto it = in_flight_.find(engine_id);
    if (it != in_flight_.end() && it->second->stream) flush_pending(*it->second);
  }
  if (conn.queued_bytes <= options_.max_output_buffer_bytes / 2) start_reading(conn);
}

void Server::flush_pending(InFlight& r) {
  if (!r.conn || (r.pending_ids.empty() && r.pending_text.empty())) return;
  Span span;
  span.name = "stream_write";
  span.track = Track::kDaemon;
  span.start_ns = trace_now_ns();
  span.tokens = int32_t(r.pending_ids.size());
  Frame frame = encode_tokens(r.client_id, r.pending_ids, r.pending_text);
  span.bytes = int64_t(frame.size());
  write_frame(*r.conn, std::move(frame));
  span.dur_ns = trace_now_ns() - span.start_ns;
  r.spans.push_back(span);
  r.pending_ids.clear();
  r.pending_text.clear();
}

// ---- reading requests ----

void Server::on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  Connection& conn = *static_cast<Connection*>(stream->data);
  Server* self = conn.server;
  if (nread == 0) return;
  if (nread < 0) {
    if (nread != UV_EOF) {
      spdlog::debug("connection {}: read: {}", conn.id, uv_strerror(int(nread)));
    }
    if (conn.reader.buffered() > 0) {
      spdlog::warn("connection {}: closed in the middle of a frame ({} bytes buffered)", conn.id,
                   conn.reader.buffered());
    }
    self->disconnect(conn);
    return;
  }
  conn.reader.append(reinterpret_cast<const uint8_t*>(buf->base), size_t(nread));
  self->read_frames(conn);
}

void Server::read_frames(Connection& conn) {
  while (!conn.closing) {
    auto frame = conn.reader.next();
    if (!frame) return protocol_error(conn, 0, frame.error());
    if (frame->empty()) return;
    auto request = verify_request(*frame);
    if (!request) return protocol_error(conn, 0, request.error());
    handle_frame(conn, **request);
  }
}

void Server::handle_frame(Connection& conn, const wire::Request& request) {
  const uint64_t id = request.id();
  switch (request.body_type()) {
    case wire::RequestBody::GenerateRequest:
      return handle_generate(conn, id, *request.body_as_GenerateRequest());
    case wire::RequestBody::CancelRequest: {
      auto it = conn.requests.find(request.body_as_CancelRequest()->target_id());
      if (it != conn.requests.end()) engine_.cancel(it->second);
      return;  // answered by the request's Finished{abort}; unknown ids are ignored
    }
    case wire::RequestBody::StatusRequest:
      return write_frame(conn, encode_status(id, daemon_status()));
    case wire::RequestBody::MetricsRequest:
      return write_frame(conn, encode_metrics(id, metrics_text()));
    case wire::RequestBody::TraceRequest: {
      const auto* t = request.body_as_TraceRequest();
      std::optional<uint64_t> trace_id;
      if (t->trace_id()) trace_id = *t->trace_id();
      return write_frame(conn, encode_trace(id, engine_.trace_json(trace_id, t->last_n())));
    }
    case wire::RequestBody::HealthRequest:
      return write_frame(conn, encode_health(id, !draining_, draining_ ? "draining" : "serving"));
    default:
      ++protocol_errors_;
      return write_frame(conn, encode_error(id, make_error(ErrorCode::kProtocol,
                                                           "request has no body this daemon "
                                                           "understands")));
  }
}

void Server::handle_generate(Connection& conn, uint64_t id, const wire::GenerateRequest& request) {
  auto reject = [&](const Error& e) {
    ++requests_rejected_;
    spdlog::debug("connection {} request {} rejected: {}", conn.id, id, e.to_string());
    write_frame(conn, encode_error(id, e));
  };
  if (draining_) return reject(make_error(ErrorCode::kOverloaded, "tandemd is shutting down"));
  if (conn.requests.count(id)) {
    return reject(make_error(ErrorCode::kInvalidArgument,
                             "request id " + std::to_string(id) + " is already in flight"));
  }
  if (int64_t(conn.requests.size()) >= options_.max_requests_per_connection) {
    return reject(make_error(ErrorCode::kOverloaded,
                             "connection has " + std::to_string(conn.requests.size()) +
                                 " requests in flight (max_requests_per_connection)"));
  }
  auto call = decode_generate(request);
  if (!call) return reject(call.error());
  // Tokenizing runs on the loop: it is CPU-bound and short next to a prefill.
  Span tokenize;
  tokenize.name = "tokenize";
  tokenize.track = Track::kDaemon;
  tokenize.start_ns = trace_now_ns();
  auto ids = prompts_(call->prompt);
  tokenize.dur_ns = trace_now_ns() - tokenize.start_ns;
  if (!ids) return reject(ids.error());
  tokenize.tokens = int32_t(ids->size());
  if (!call->max_tokens_set) call->sampling.max_tokens = options_.default_max_tokens;

  const uint64_t engine_id = next_request_id_++;
  auto flight = std::make_unique<InFlight>(events_);
  flight->engine_id = engine_id;
  flight->client_id = id;
  flight->conn = &conn;
  flight->stream = call->stream;
  InFlight& r = *flight;
  r.spans.push_back(tokenize);
  in_flight_.emplace(engine_id, std::move(flight));
  const int32_t prompt_tokens = int32_t(ids->size());
  Status submitted =
      engine_.submit(engine_id, GenerateInput{std::move(*ids), call->sampling}, &r.observer);
  if (!submitted) {
    in_flight_.erase(engine_id);  // a rejected request gets no events
    return reject(submitted.error());
  }
  ++requests_accepted_;
  conn.requests.emplace(id, engine_id);
  // Events reach the loop only after this callback returns, so Accepted is always first.
  write_frame(conn, encode_accepted(id, prompt_tokens, engine_id));
}

// ---- engine events ----

void Server::on_events(uv_async_t* handle) {
  static_cast<Server*>(handle->data)->deliver_events();
}

void Server::deliver_events() {
  for (EventQueue::Event& event : events_->take()) {
    ++events_delivered_;
    if (auto* tokens = std::get_if<TokenEvent>(&event)) {
      auto it = in_flight_.find(tokens->request_id);
      if (it == in_flight_.end()) continue;
      InFlight& r = *it->second;
      tokens_generated_ += tokens->ids.size();
      if (!r.conn) continue;
      r.pending_ids.insert(r.pending_ids.end(), tokens->ids.begin(), tokens->ids.end());
      r.pending_text += tokens->text;
      if (r.stream && r.conn->queued_bytes <= options_.max_output_buffer_bytes) flush_pending(r);
      continue;
    }
    FinishEvent& fin = std::get<FinishEvent>(event);
    auto it = in_flight_.find(fin.request_id);
    if (it == in_flight_.end()) continue;
    InFlight& r = *it->second;
    // Finished is one frame per request and requests per connection are capped, so it is
    // written even over the limit; the tokens coalesced so far go right before it. A failed
    // write disconnects, which nulls r.conn.
    flush_pending(r);
    if (r.conn) {
      Span span;
      span.name = "stream_write";
      span.track = Track::kDaemon;
      span.start_ns = trace_now_ns();
      Frame frame = encode_finished(r.client_id, fin);
      span.bytes = int64_t(frame.size());
      write_frame(*r.conn, std::move(frame));
      span.dur_ns = trace_now_ns() - span.start_ns;
      r.spans.push_back(span);
    }
    engine_.add_trace_spans(fin.request_id, r.spans);
    if (r.conn) r.conn->requests.erase(r.client_id);
    spdlog::debug("request {} finished: {}", fin.request_id,
                  wire::EnumNameFinishReason(to_wire(fin.reason)));
    in_flight_.erase(it);
  }
  maybe_finish_shutdown();
}

// ---- shutdown ----

void Server::on_signal(uv_signal_t* handle, int signum) {
  spdlog::info(
      "{}: {}", signum == SIGTERM ? "SIGTERM" : "SIGINT",
      static_cast<Server*>(handle->data)->draining_ ? "aborting in-flight requests" : "draining");
  static_cast<Server*>(handle->data)->begin_shutdown();
}

void Server::begin_shutdown() {
  if (closing_) return;
  if (draining_) return abort_all();
  draining_ = true;
  notify_("STOPPING=1");
  notify_("STATUS=draining " + std::to_string(in_flight_.size()) + " requests");
  // Stop accepting: the listening socket closes now (a socket-activated one stays with systemd).
  close_handle(reinterpret_cast<uv_handle_t*>(&listener_));
  if (bound_path_) {
    unlink(options_.socket_path.c_str());
    bound_path_ = false;
  }
  uv_timer_start(&drain_timer_, on_drain_timeout, uint64_t(options_.shutdown_timeout_s * 1000), 0);
  maybe_finish_shutdown();
}

void Server::on_drain_timeout(uv_timer_t* handle) {
  Server* self = static_cast<Server*>(handle->data);
  spdlog::warn("shutdown timeout: aborting {} requests", self->in_flight_.size());
  self->abort_all();
}

void Server::abort_all() {
  aborting_ = true;
  for (const auto& [engine_id, r] : in_flight_) engine_.cancel(engine_id);
}

void Server::maybe_finish_shutdown() {
  if (!draining_ || closing_ || !in_flight_.empty()) return;
  closing_ = true;
  spdlog::info("drained; closing {} connections", connection_list_.size());
  // Connections flush their Finished frames, then close; the rest of the handles close now.
  for (Connection* conn : std::vector<Connection*>(connection_list_)) {
    connection_closed(*conn);
    close_after_flush(*conn);
  }
  events_->close();
  close_handle(reinterpret_cast<uv_handle_t*>(&events_async_));
  close_handle(reinterpret_cast<uv_handle_t*>(&sigterm_));
  close_handle(reinterpret_cast<uv_handle_t*>(&sigint_));
  close_handle(reinterpret_cast<uv_handle_t*>(&drain_timer_));
  close_handle(reinterpret_cast<uv_handle_t*>(&watchdog_timer_));
  close_handle(reinterpret_cast<uv_handle_t*>(&listener_));
  if (metrics_http_) metrics_http_->close();
}

// ---- systemd watchdog ----

void Server::on_watchdog(uv_timer_t* handle) {
  Server* self = static_cast<Server*>(handle->data);
  // Pinged only while the stages make progress: idle, or events arrived since the last tick.
  // A wedged engine misses pings and systemd restarts the daemon.
  const bool progressed = self->events_delivered_ != self->watchdog_last_events_;
  if (self->in_flight_.empty() || progressed) self->notify_("WATCHDOG=1");
  self->watchdog_last_events_ = self->events_delivered_;
  self->notify_("STATUS=serving; " + std::to_string(self->in_flight_.size()) +
                " requests in flight, " + std::to_string(self->num_connections_) + " connections");
}

DaemonStatus Server::daemon_status() const {
  DaemonStatus s;
  s.state = draining_ ? "draining" : "serving";
  s.model = options_.model_name;
  s.engine = engine_.status();
  s.connections = num_connections_;
  s.requests_in_flight = int32_t(in_flight_.size());
  s.uptime_s = double(uv_now(loop_) - start_ms_) / 1000.0;
  return s;
}

}  // namespace tandem::daemon
