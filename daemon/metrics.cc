// The Metrics reply: the engine's Prometheus text (tandem:* names, vLLM-style) followed by what
// only the server knows (connections, rejected requests, malformed frames).
#include <sstream>

#include "connection.h"
#include "server.h"

namespace tandem::daemon {

std::string Server::metrics_text() const {
  std::ostringstream out;
  out << engine_.metrics_text();
  auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
        << name << ' ' << value << '\n';
  };
  metric("tandem:daemon_connections", "gauge", "Open client connections.", num_connections_);
  metric("tandem:daemon_connections_total", "counter", "Client connections accepted.",
         connections_total_);
  metric("tandem:daemon_requests_in_flight", "gauge", "Generate requests not finished yet.",
         in_flight_.size());
  metric("tandem:daemon_requests_accepted_total", "counter", "Generate requests accepted.",
         requests_accepted_);
  metric("tandem:daemon_requests_rejected_total", "counter",
         "Generate requests answered with an Error.", requests_rejected_);
  metric("tandem:daemon_streamed_tokens_total", "counter", "Tokens the engine handed the server.",
         tokens_generated_);
  metric("tandem:daemon_protocol_errors_total", "counter", "Malformed frames received.",
         protocol_errors_);
  metric("tandem:daemon_uptime_seconds", "gauge", "Seconds since the server started.",
         double(uv_now(loop_) - start_ms_) / 1000.0);
  const EngineStatus s = engine_.status();
  out << "# HELP tandem:daemon_kv_pages_used KV pages in use per pool.\n"
         "# TYPE tandem:daemon_kv_pages_used gauge\n";
  for (const PoolStatus& p : s.pools) {
    out << "tandem:daemon_kv_pages_used{pool=\"" << p.name << "\",device=\"" << p.device << "\"} "
        << p.used_pages << '\n';
  }
  return out.str();
}

}  // namespace tandem::daemon
