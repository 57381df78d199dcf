// A copy of the `tandem` CLI with only the daemon client commands, so the daemon's integration
// tests can drive them before (and without) the in-process engine commands.
#include <CLI/CLI.hpp>

#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"tandem (daemon client commands)"};
  app.require_subcommand(1);
  int exit_code = 0;
  tandem::cli::register_generate(app, exit_code);
  tandem::cli::register_chat(app, exit_code);
  tandem::cli::register_status(app, exit_code);
  tandem::cli::register_health(app, exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
