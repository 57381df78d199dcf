// What every daemon client command shares: the --socket flag and one way to report failures.
#pragma once

#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "daemon/socket_path.h"

namespace tandem::cli {

inline void add_socket_flag(CLI::App* cmd, std::string& socket) {
  socket = daemon::client_socket_path();
  cmd->add_option("--socket", socket,
                  "tandemd socket (default: $TANDEM_SOCKET, then the "
                  "runtime directory)")
      ->capture_default_str();
}

inline int report_failure(const char* command, const Error& e) {
  std::fprintf(stderr, "tandem %s: %s\n", command, e.to_string().c_str());
  return 1;
}

}  // namespace tandem::cli
