// Metrics (Prometheus text) and trace (Chrome trace-event JSON) replies. Until per-request
// tracing lands they carry what the engine status and the server's counters know.
#include <sstream>

#include <nlohmann/json.hpp>

#include "connection.h"
#include "server.h"

namespace tandem::daemon {

std::string Server::metrics_text() const {
  const DaemonStatus s = daemon_status();
  std::ostringstream out;
  auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
        << name << ' ' << value << '\n';
  };
  metric("tandem_requests_running", "gauge", "Requests being prefilled or decoded.",
         s.engine.running);
  metric("tandem_requests_waiting", "gauge", "Requests queued for admission.", s.engine.waiting);
  metric("tandem_requests_finished_total", "counter", "Requests the engine finished.",
         s.engine.finished);
  metric("tandem_requests_accepted_total", "counter", "Generate requests accepted.",
         requests_accepted_);
  metric("tandem_requests_rejected_total", "counter", "Generate requests answered with Error.",
         requests_rejected_);
  metric("tandem_generated_tokens_total", "counter", "Tokens generated.", tokens_generated_);
  metric("tandem_connections", "gauge", "Open client connections.", s.connections);
  metric("tandem_connections_total", "counter", "Client connections accepted.", connections_total_);
  metric("tandem_protocol_errors_total", "counter", "Malformed frames received.", protocol_errors_);
  metric("tandem_uptime_seconds", "gauge", "Seconds since the server started.", s.uptime_s);
  out << "# HELP tandem_kv_pages_total KV pages per pool.\n# TYPE tandem_kv_pages_total gauge\n";
  for (const PoolStatus& p : s.engine.pools) {
    out << "tandem_kv_pages_total{pool=\"" << p.name << "\",device=\"" << p.device << "\"} "
        << p.total_pages << '\n';
  }
  out << "# HELP tandem_kv_pages_used KV pages in use per pool.\n"
         "# TYPE tandem_kv_pages_used gauge\n";
  for (const PoolStatus& p : s.engine.pools) {
    out << "tandem_kv_pages_used{pool=\"" << p.name << "\",device=\"" << p.device << "\"} "
        << p.used_pages << '\n';
  }
  return out.str();
}

std::string Server::trace_json() const {
  // Counter events at "now": per-request spans come with request tracing.
  const DaemonStatus s = daemon_status();
  const double ts_us = s.uptime_s * 1e6;
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json pages = nlohmann::json::object();
  for (const PoolStatus& p : s.engine.pools) pages[p.name] = p.used_pages;
  events.push_back(
      {{"name", "kv_pages_used"}, {"ph", "C"}, {"ts", ts_us}, {"pid", 1}, {"args", pages}});
  events.push_back({{"name", "requests"},
                    {"ph", "C"},
                    {"ts", ts_us},
                    {"pid", 1},
                    {"args", {{"running", s.engine.running}, {"waiting", s.engine.waiting}}}});
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

}  // namespace tandem::daemon
