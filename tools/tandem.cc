// The `tandem` command: in-process pipeline, model tools, daemon clients, benchmarks.
#include <CLI/CLI.hpp>

#include "commands.h"
#include "tandem_build_config.h"

int main(int argc, char** argv) {
  CLI::App app{"tandem: serve LLMs split across two GPUs (or the CPU)"};
  app.set_version_flag("--version", TANDEM_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;
  tandem::cli::register_run(app, exit_code);
  tandem::cli::register_tokenize(app, exit_code);
  tandem::cli::register_mkmodel(app, exit_code);
  tandem::cli::register_generate(app, exit_code);
  tandem::cli::register_chat(app, exit_code);
  tandem::cli::register_status(app, exit_code);
  tandem::cli::register_health(app, exit_code);
  tandem::cli::register_bench(app, exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
