// `tandem run`: the whole pipeline in-process, no daemon. Streams text to stdout, or prints the
// contract's JSON with --json; per-stage timings go to stderr.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "engine/engine.h"
#include "engine/frontend.h"
#include "engine_flags.h"
#include "request_flags.h"

namespace tandem::cli {
namespace {

class CollectingObserver final : public EngineObserver {
 public:
  explicit CollectingObserver(bool stream) : stream_(stream) {}
  void on_tokens(TokenEvent ev) override {
    ids.insert(ids.end(), ev.ids.begin(), ev.ids.end());
    append(ev.text);
  }
  void on_finished(FinishEvent ev) override {
    append(ev.text_tail);
    finished = std::move(ev);
  }
  std::vector<int32_t> ids;
  std::string text;
  std::optional<FinishEvent> finished;

 private:
  void append(const std::string& s) {
    text += s;
    if (stream_ && !s.empty()) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    }
  }
  bool stream_;
};

}  // namespace

void register_run(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("run", "Run the whole pipeline in-process on a prompt");
  auto engine_flags = std::make_shared<EngineFlags>();
  auto request_flags = std::make_shared<RequestFlags>();
  auto json = std::make_shared<bool>(false);
  add_engine_flags(cmd, *engine_flags);
  add_request_flags(cmd, *request_flags);
  cmd->add_flag("--json", *json, "Print one JSON object (token_ids, text, finish_reason, timings)");
  cmd->callback([=, &exit_code] {
    auto fail = [&](const Error& e) {
      std::fprintf(stderr, "tandem run: %s\n", e.to_string().c_str());
      exit_code = 1;
    };
    auto input = prompt_input(*request_flags);
    if (!input) return fail(input.error());
    auto engine = Engine::create(engine_options(*engine_flags));
    if (!engine) return fail(engine.error());
    auto prompt = build_prompt((*engine)->tokenizer(), (*engine)->chat_template(), *input);
    if (!prompt) return fail(prompt.error());

    CollectingObserver observer(/*stream=*/!*json);
    GenerateInput gen{prompt->ids, sampling_params(*request_flags)};
    Status submitted = (*engine)->submit(1, std::move(gen), &observer);
    if (!submitted) return fail(submitted.error());
    (*engine)->run_until_idle();
    if (!observer.finished) return fail(make_error(ErrorCode::kInternal, "request did not finish"));
    const FinishEvent& fin = *observer.finished;
    if (*json) {
      std::cout << result_json(observer.ids, observer.text, fin).dump() << std::endl;
    } else {
      print_timings(fin);
    }
    if (fin.reason == FinishReason::kError) exit_code = 1;
  });
}

}  // namespace tandem::cli
