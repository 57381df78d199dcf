// `--metrics-listen HOST:PORT`: a minimal HTTP/1.1 endpoint on the daemon's libuv loop for
// Prometheus scrapers. GET /metrics answers the same text as `tandem metrics`; anything else
// is 404 (another path) or 405 (another method). One request per connection (Connection:
// close), requests capped at 8 KiB, no keep-alive, no TLS: bind it to localhost or a trusted
// network. Off by default.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <uv.h>

#include "core/error.h"

namespace tandem::daemon {

class MetricsHttp {
 public:
  using TextFn = std::function<std::string()>;
  MetricsHttp(uv_loop_t* loop, TextFn text) : loop_(loop), text_(std::move(text)) {}
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;
  ~MetricsHttp();

  // "127.0.0.1:9400", "[::1]:9400", "0.0.0.0:0" (port 0: any free port, see port()).
  Status start(const std::string& host_port);
  int port() const { return port_; }
  // Closes the listener and every open client; the loop can then finish.
  void close();

  // The reply to one request head (exposed for tests of the parser).
  static std::string respond(const std::string& head, const TextFn& text);

 private:
  struct Client;
  static void on_connection(uv_stream_t* server, int status);
  void drop(Client* c);

  uv_loop_t* loop_;
  TextFn text_;
  uv_tcp_t listener_{};
  bool listening_ = false;
  int port_ = 0;
  std::vector<Client*> clients_;
};

// Splits "HOST:PORT" / "[V6]:PORT"; errors name the setting.
Result<std::pair<std::string, int>> parse_host_port(const std::string& text);

}  // namespace tandem::daemon
