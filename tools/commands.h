// Subcommands of the `tandem` CLI. Each lives in its own tools/cmd_*.cc and registers itself on
// the app; tools/tandem.cc only calls these. A callback sets `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::cli {

// In-process pipeline and model tools (tools/cmd_run.cc, cmd_tokenize.cc, cmd_mkmodel.cc).
void register_run(CLI::App& app, int& exit_code);
void register_tokenize(CLI::App& app, int& exit_code);
void register_mkmodel(CLI::App& app, int& exit_code);

// Daemon clients (tools/cmd_generate.cc, cmd_chat.cc, cmd_status.cc, cmd_health.cc).
void register_generate(CLI::App& app, int& exit_code);
void register_chat(CLI::App& app, int& exit_code);
void register_status(CLI::App& app, int& exit_code);
void register_health(CLI::App& app, int& exit_code);

// Benchmarks (tools/cmd_bench.cc): `tandem bench latency|...`; `bench serve` is
// tools/cmd_bench_serve.cc, registered on the `bench` subcommand.
void register_bench(CLI::App& app, int& exit_code);
void register_bench_serve(CLI::App& bench, int& exit_code);

}  // namespace tandem::cli
