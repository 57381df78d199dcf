#include "metrics_http.h"

#include <algorithm>
#include <cstdlib>

#include <spdlog/spdlog.h>

namespace tandem::daemon {

namespace {

constexpr size_t kMaxHead = 8192;

std::string reply(int code, const char* reason, const std::string& type, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

}  // namespace

struct MetricsHttp::Client {
  uv_tcp_t tcp{};
  uv_write_t write{};
  MetricsHttp* owner = nullptr;
  std::string head;
  std::string out;
  char buf[1024];
  bool answered = false;
};

Result<std::pair<std::string, int>> parse_host_port(const std::string& text) {
  auto bad = [&] {
    return make_error(ErrorCode::kInvalidArgument,
                      "metrics_listen: '" + text + "' is not HOST:PORT (e.g. 127.0.0.1:9400)");
  };
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return bad();
  std::string host = text.substr(0, colon);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  const long port = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535) return bad();
  return std::make_pair(host, int(port));
}

std::string MetricsHttp::respond(const std::string& head, const TextFn& text) {
  const size_t eol = head.find("\r\n");
  const std::string line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
    return reply(400, "Bad Request", "text/plain", "bad request line\n");
  }
  const std::string method = line.substr(0, sp1);
  std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (path != "/metrics") return reply(404, "Not Found", "text/plain", "try /metrics\n");
  if (method != "GET" && method != "HEAD") {
    return reply(405, "Method Not Allowed", "text/plain", "GET only\n");
  }
  std::string r = reply(200, "OK", "text/plain; version=0.0.4; charset=utf-8", text());
  if (method == "HEAD") r.resize(r.find("\r\n\r\n") + 4);
  return r;
}

Status MetricsHttp::start(const std::string& host_port) {
  TANDEM_ASSIGN_OR_RETURN(auto hp, parse_host_port(host_port));
  sockaddr_storage addr{};
  int rc = uv_ip4_addr(hp.first.c_str(), hp.second, reinterpret_cast<sockaddr_in*>(&addr));
  if (rc != 0)
    rc = uv_ip6_addr(hp.first.c_str(), hp.second, reinterpret_cast<sockaddr_in6*>(&addr));
  if (rc != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "metrics_listen: '" + hp.first + "' is not an IPv4 or IPv6 address");
  }
  uv_tcp_init(loop_, &listener_);
  listener_.data = this;
  listening_ = true;
  rc = uv_tcp_bind(&listener_, reinterpret_cast<const sockaddr*>(&addr), 0);
  if (rc == 0) rc = uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), 64, on_connection);
  if (rc != 0) {
    return make_error(ErrorCode::kIo,
                      "metrics_listen " + host_port + ": " + std::string(uv_strerror(rc)));
  }
  sockaddr_storage bound{};
  int len = sizeof bound;
  uv_tcp_getsockname(&listener_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  spdlog::info("metrics on http://{}:{}/metrics", hp.first, port_);
  return Status::Ok();
}

void MetricsHttp::on_connection(uv_stream_t* server, int status) {
  auto* self = static_cast<MetricsHttp*>(server->data);
  if (status < 0) return;
  auto* c = new Client;
  c->owner = self;
  uv_tcp_init(self->loop_, &c->tcp);
  c->tcp.data = c;
  if (uv_accept(server, reinterpret_cast<uv_stream_t*>(&c->tcp)) != 0) {
    uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp),
             [](uv_handle_t* h) { delete static_cast<Client*>(h->data); });
    return;
  }
  self->clients_.push_back(c);
  uv_read_start(
      reinterpret_cast<uv_stream_t*>(&c->tcp),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* cl = static_cast<Client*>(h->data);
        *buf = uv_buf_init(cl->buf, sizeof cl->buf);
      },
      [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
        auto* cl = static_cast<Client*>(s->data);
        if (n < 0) return cl->owner->drop(cl);
        if (cl->answered) return;
        cl->head.append(buf->base, size_t(n));
        const bool complete = cl->head.find("\r\n\r\n") != std::string::npos;
        if (!complete && cl->head.size() < kMaxHead) return;
        cl->answered = true;
        uv_read_stop(s);
        cl->out = complete ? respond(cl->head, cl->owner->text_)
                           : reply(431, "Request Header Fields Too Large", "text/plain", "");
        uv_buf_t out = uv_buf_init(cl->out.data(), unsigned(cl->out.size()));
        cl->write.data = cl;
        uv_write(&cl->write, s, &out, 1, [](uv_write_t* w, int) {
          auto* done = static_cast<Client*>(w->data);
          done->owner->drop(done);
        });
      });
}

void MetricsHttp::drop(Client* c) {
  auto it = std::find(clients_.begin(), clients_.end(), c);
  if (it == clients_.end()) return;  // already closing
  clients_.erase(it);
  uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp),
           [](uv_handle_t* h) { delete static_cast<Client*>(h->data); });
}

void MetricsHttp::close() {
  for (Client* c : std::vector<Client*>(clients_)) drop(c);
  if (listening_ && !uv_is_closing(reinterpret_cast<uv_handle_t*>(&listener_))) {
    uv_close(reinterpret_cast<uv_handle_t*>(&listener_), nullptr);
  }
  listening_ = false;
}

MetricsHttp::~MetricsHttp() {
  close();
}

}  // namespace tandem::daemon
