// `tandem status`, and its siblings `tandem metrics` (Prometheus text) and `tandem trace`
// (Chrome trace JSON): read-only views of a running tandemd. Registered together because they
// share everything but the request.
#include <cstdio>
#include <iostream>
#include <optional>

#include "commands.h"
#include "daemon/client.h"
#include "daemon_flags.h"

namespace tandem::cli {

namespace {

void print_status(const daemon::DaemonStatus& s) {
  std::printf(
      "state       %s\nmodel       %s\nuptime      %.1f s\nconnections %d\n"
      "requests    %d in flight (%d running, %d waiting), %lld finished\n",
      s.state.c_str(), s.model.c_str(), s.uptime_s, s.connections, s.requests_in_flight,
      s.engine.running, s.engine.waiting, static_cast<long long>(s.engine.finished));
  for (const PoolStatus& p : s.engine.pools) {
    const double mib = double(p.page_bytes) * p.total_pages / (1 << 20);
    std::printf("kv pool     %-6s on %-7s %d/%d pages used, %d cached (%d tokens/page, %.1f MiB)\n",
                p.name.c_str(), p.device.c_str(), p.used_pages, p.total_pages, p.cached_pages,
                p.page_size, mib);
  }
  auto mb = [](int64_t b) { return double(b) / (1 << 20); };
  for (const DeviceMemory& d : s.engine.memory) {
    if (d.device == "cpu") {
      // Virtual size holds address space never touched (arenas, stacks, unwritten KV pages);
      // resident is what the process holds in RAM now.
      std::printf("\nmemory on cpu (this process): %.1f MiB virtual, %.1f MiB resident\n",
                  mb(d.total_bytes), mb(d.resident_bytes));
    } else {
      std::printf("\nmemory on %s: %.1f MiB total\n", d.device.c_str(), mb(d.total_bytes));
    }
    for (const MemoryPart& p : d.parts) {
      std::printf("  %-34s %10.1f MiB  %s\n", p.name.c_str(), mb(p.bytes), p.detail.c_str());
    }
    if (d.device == "cpu") {
      std::printf("  %-34s %10.1f MiB  (not part of the total)\n", "host available",
                  mb(d.host_available_bytes));
    } else {
      std::printf("  %-34s %10.1f MiB\n", "free", mb(d.free_bytes));
    }
    for (const SettingEffect& e : d.settings) {
      std::printf("  setting %s %s: %.1f MiB, %s\n", e.setting.c_str(), e.value.c_str(),
                  mb(e.bytes), e.effect.c_str());
    }
  }
}

template <typename Query>
CLI::App* add_text_query(CLI::App& app, const char* name, const char* help, Query query,
                         int& exit_code) {
  auto* cmd = app.add_subcommand(name, help);
  auto socket = std::make_shared<std::string>();
  add_socket_flag(cmd, *socket);
  cmd->callback([=, &exit_code] {
    auto client = daemon::Client::connect(*socket);
    if (!client) return void(exit_code = report_failure(name, client.error()));
    auto text = query(*client);
    if (!text) return void(exit_code = report_failure(name, text.error()));
    std::cout << *text;
    if (!text->empty() && text->back() != '\n') std::cout << '\n';
  });
  return cmd;
}

}  // namespace

void register_status(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("status", "State, requests and KV pages of a running tandemd");
  auto socket = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  add_socket_flag(cmd, *socket);
  cmd->add_flag("--json", *json, "Print JSON (running/waiting requests, pages per pool)");
  cmd->callback([=, &exit_code] {
    auto client = daemon::Client::connect(*socket);
    if (!client) return void(exit_code = report_failure("status", client.error()));
    auto status = daemon::query_status(*client);
    if (!status) return void(exit_code = report_failure("status", status.error()));
    if (*json) {
      std::cout << daemon::status_json(*status).dump() << std::endl;
    } else {
      print_status(*status);
    }
  });
  add_text_query(
      app, "metrics", "Prometheus metrics of a running tandemd",
      [](daemon::Client& c) { return daemon::query_metrics(c); }, exit_code);
  auto request = std::make_shared<std::optional<uint64_t>>();
  auto last = std::make_shared<uint32_t>(0);
  auto* trace = add_text_query(
      app, "trace", "Chrome trace JSON of finished requests (opens in Perfetto)",
      [=](daemon::Client& c) { return daemon::query_trace(c, *request, *last); }, exit_code);
  trace->add_option("--request", *request, "Trace id of one request (generate --json: trace_id)");
  trace->add_option("--last", *last, "The last N finished requests (0 = all kept)");
}

}  // namespace tandem::cli
