// tandemd: the daemon binary. Everything but the choice of engine lives in daemon_main.cc.
#include "daemon_main.h"
#include "engine/frontend.h"

int main(int argc, char** argv) {
  tandem::daemon::DaemonHooks hooks;
  hooks.create_engine = [](const tandem::EngineOptions& options) {
    return tandem::Engine::create(options);
  };
  hooks.prompt_builder = [](const tandem::Engine& engine) -> tandem::daemon::PromptBuilder {
    return [&engine](const tandem::PromptInput& input) -> tandem::Result<std::vector<int32_t>> {
      TANDEM_ASSIGN_OR_RETURN(
          auto prompt, tandem::build_prompt(engine.tokenizer(), engine.chat_template(), input));
      return std::move(prompt.ids);
    };
  };
  return tandem::daemon::run_daemon(argc, argv, hooks);
}
