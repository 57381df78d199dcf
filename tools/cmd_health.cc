// `tandem health`: exit 0 when tandemd answers and serves, 1 otherwise (for scripts and probes).
#include <cstdio>

#include "commands.h"
#include "daemon/client.h"
#include "daemon_flags.h"

namespace tandem::cli {

void register_health(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("health", "Exit 0 when tandemd is up and serving");
  auto socket = std::make_shared<std::string>();
  auto timeout_ms = std::make_shared<int>(5000);
  add_socket_flag(cmd, *socket);
  cmd->add_option("--timeout-ms", *timeout_ms, "How long to wait for the answer");
  cmd->callback([=, &exit_code] {
    auto client = daemon::Client::connect(*socket);
    if (!client) return void(exit_code = report_failure("health", client.error()));
    auto health = daemon::query_health(*client, *timeout_ms);
    if (!health) return void(exit_code = report_failure("health", health.error()));
    std::printf("%s\n", health->state.c_str());
    exit_code = health->ok ? 0 : 1;
  });
}

}  // namespace tandem::cli
