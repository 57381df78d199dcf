// `tandem chat`: a REPL against tandemd. The conversation is kept here and sent whole each turn;
// the daemon renders it with the model's chat template, so the prompt is exactly the model's.
// Lines starting with '/' are commands: /reset, /exit.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "daemon/client.h"
#include "daemon_flags.h"

namespace tandem::cli {

namespace {

struct ChatFlags {
  std::string socket;
  std::string system;
  int32_t max_tokens = 512;
  std::optional<float> temperature, top_p;
  std::optional<int32_t> top_k;
  std::optional<uint64_t> seed;
};

int chat_loop(const ChatFlags& f) {
  auto client = daemon::Client::connect(f.socket);
  if (!client) return report_failure("chat", client.error());
  const bool interactive = isatty(STDIN_FILENO);
  PromptInput prompt;
  prompt.kind = PromptInput::Kind::kMessages;
  auto reset = [&] {
    prompt.messages = nlohmann::ordered_json::array();
    if (!f.system.empty()) prompt.messages.push_back({{"role", "system"}, {"content", f.system}});
  };
  reset();
  SamplingParams sampling;
  sampling.max_tokens = f.max_tokens;
  sampling.temperature = f.temperature;
  sampling.top_p = f.top_p;
  sampling.top_k = f.top_k;
  sampling.seed = f.seed;
  uint64_t next_id = 1;
  std::string line;
  for (;;) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      reset();
      continue;
    }
    prompt.messages.push_back({{"role", "user"}, {"content", line}});
    daemon::GenerateOptions options;
    options.on_text = [](const std::string& text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
    auto result = daemon::generate(*client, next_id++, prompt, sampling, options);
    std::fputs("\n", stdout);
    if (!result) {
      prompt.messages.erase(prompt.messages.end() - 1);  // the turn did not happen
      report_failure("chat", result.error());
      if (result.error().code == ErrorCode::kIo) return 1;  // the daemon is gone
      continue;
    }
    if (result->finished.reason == FinishReason::kError && result->finished.error) {
      report_failure("chat", *result->finished.error);
    }
    prompt.messages.push_back({{"role", "assistant"}, {"content", result->text}});
  }
  return 0;
}

}  // namespace

void register_chat(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("chat", "Chat with the model tandemd serves (stdin lines)");
  auto f = std::make_shared<ChatFlags>();
  add_socket_flag(cmd, f->socket);
  cmd->add_option("--system", f->system, "System message that starts the conversation");
  cmd->add_option("--max-tokens", f->max_tokens, "Tokens per reply at most")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", f->temperature, "0 = greedy");
  cmd->add_option("--top-p", f->top_p);
  cmd->add_option("--top-k", f->top_k);
  cmd->add_option("--seed", f->seed);
  cmd->callback([f, &exit_code] { exit_code = chat_loop(*f); });
}

}  // namespace tandem::cli
