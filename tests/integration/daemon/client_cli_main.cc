// A copy of the `tandem` CLI (tools/tandem.cc's commands) built here, so the daemon's integration
// tests can drive the client commands and compare with `run` whether or not tools/ builds it.
#include <CLI/CLI.hpp>

#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"tandem (test copy)"};
  app.require_subcommand(1);
  int exit_code = 0;
  tandem::cli::register_run(app, exit_code);
  tandem::cli::register_tokenize(app, exit_code);
  tandem::cli::register_mkmodel(app, exit_code);
  tandem::cli::register_generate(app, exit_code);
  tandem::cli::register_chat(app, exit_code);
  tandem::cli::register_status(app, exit_code);
  tandem::cli::register_health(app, exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
