// `tandem generate`: one request through tandemd. Streams text to stdout as it arrives, or
// prints the same JSON object as `tandem run --json`.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "daemon/client.h"
#include "daemon_flags.h"
#include "request_flags.h"

namespace tandem::cli {

void register_generate(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("generate", "Generate through a running tandemd");
  auto socket = std::make_shared<std::string>();
  auto flags = std::make_shared<RequestFlags>();
  auto json = std::make_shared<bool>(false);
  auto timings = std::make_shared<bool>(false);
  add_socket_flag(cmd, *socket);
  add_request_flags(cmd, *flags);
  cmd->add_flag("--json", *json, "Print one JSON object (token_ids, text, finish_reason, timings)");
  cmd->add_flag("--timings", *timings, "Print the request's per-stage timings as a table");
  cmd->callback([=, &exit_code] {
    auto input = prompt_input(*flags);
    if (!input) return void(exit_code = report_failure("generate", input.error()));
    auto client = daemon::Client::connect(*socket);
    if (!client) return void(exit_code = report_failure("generate", client.error()));
    daemon::GenerateOptions options;
    // Unset --max-tokens: the daemon applies the model's generation_config default.
    options.max_tokens_set = cmd->get_option("--max-tokens")->count() > 0;
    if (!*json) {
      options.on_text = [](const std::string& text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      };
    }
    auto result = daemon::generate(*client, 1, *input, sampling_params(*flags), options);
    if (!result) return void(exit_code = report_failure("generate", result.error()));
    const FinishEvent& fin = result->finished;
    if (*json) {
      auto j = result_json(result->ids, result->text, fin);
      j["trace_id"] = result->trace_id;  // for `tandem trace --request`
      std::cout << j.dump() << std::endl;
    } else if (*timings) {
      print_timings(fin);
    } else {
      std::fprintf(stderr,
                   "\n-- %d prompt + %d generated tokens, finish: %s, ttft %.2f ms, "
                   "%.2f ms/token\n",
                   fin.usage.prompt_tokens, fin.usage.completion_tokens,
                   finish_reason_name(fin.reason), fin.timings.ttft_ms, fin.timings.tpot_ms);
    }
    if (fin.reason == FinishReason::kError) {
      if (fin.error) report_failure("generate", *fin.error);
      exit_code = 1;
    }
  });
}

}  // namespace tandem::cli
