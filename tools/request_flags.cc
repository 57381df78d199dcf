#include "request_flags.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace tandem::cli {

void add_request_flags(CLI::App* cmd, RequestFlags& f) {
  auto* prompt = cmd->add_option("--prompt", f.prompt,
                                 "Prompt text (special tokens added as the tokenizer says)");
  auto* ids = cmd->add_option("--prompt-ids", f.prompt_ids, "Prompt as token ids: 1,2,3");
  auto* msgs =
      cmd->add_option("--messages", f.messages_file,
                      "JSON file with chat messages, rendered with the model's chat template");
  prompt->excludes(ids)->excludes(msgs);
  ids->excludes(msgs);
  cmd->add_flag("--no-generation-prompt", f.no_generation_prompt,
                "With --messages: do not append the assistant turn header");
  cmd->add_option("--max-tokens", f.max_tokens, "Tokens to generate at most")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", f.temperature, "0 = greedy");
  cmd->add_option("--top-p", f.top_p);
  cmd->add_option("--top-k", f.top_k, "-1 or 0 = off");
  cmd->add_option("--min-p", f.min_p);
  cmd->add_option("--repetition-penalty", f.repetition_penalty);
  cmd->add_option("--presence-penalty", f.presence_penalty);
  cmd->add_option("--frequency-penalty", f.frequency_penalty);
  cmd->add_option("--seed", f.seed, "Reproducible sampling");
  cmd->add_option("--stop", f.stop, "Stop string (repeatable)");
  cmd->add_option("--stop-token-ids", f.stop_token_ids, "Stop token ids")->delimiter(',');
  cmd->add_flag("--ignore-eos", f.ignore_eos);
  cmd->add_option("--min-tokens", f.min_tokens);
  cmd->add_flag("--keep-special-tokens", f.keep_special_tokens,
                "Include special tokens in the output text");
}

Result<PromptInput> prompt_input(const RequestFlags& f) {
  PromptInput in;
  const int given =
      int(!f.prompt.empty()) + int(!f.prompt_ids.empty()) + int(!f.messages_file.empty());
  if (given != 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "give exactly one of --prompt, --prompt-ids, --messages");
  }
  if (!f.prompt.empty()) {
    in.kind = PromptInput::Kind::kText;
    in.text = f.prompt;
  } else if (!f.prompt_ids.empty()) {
    in.kind = PromptInput::Kind::kTokenIds;
    std::stringstream ss(f.prompt_ids);
    std::string item;
    while (std::getline(ss, item, ',')) {
      try {
        size_t used = 0;
        const long v = std::stol(item, &used);
        if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
        in.token_ids.push_back(int32_t(v));
      } catch (const std::exception&) {
        return make_error(ErrorCode::kInvalidArgument,
                          "--prompt-ids: '" + item + "' is not a token id");
      }
    }
  } else {
    in.kind = PromptInput::Kind::kMessages;
    std::ifstream file(f.messages_file);
    if (!file) {
      return make_error(ErrorCode::kIo, "--messages: cannot open " + f.messages_file);
    }
    nlohmann::ordered_json doc =
        nlohmann::ordered_json::parse(file, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "--messages: " + f.messages_file + " is not valid JSON");
    }
    if (doc.is_object() && doc.contains("messages")) {
      for (auto& [k, v] : doc.items()) {
        if (k != "messages") in.template_kwargs[k] = v;
      }
      doc = doc["messages"];
    }
    in.messages = std::move(doc);
    in.add_generation_prompt = !f.no_generation_prompt;
  }
  return in;
}

SamplingParams sampling_params(const RequestFlags& f) {
  SamplingParams p;
  p.temperature = f.temperature;
  p.top_p = f.top_p;
  p.top_k = f.top_k;
  p.min_p = f.min_p;
  p.repetition_penalty = f.repetition_penalty;
  p.presence_penalty = f.presence_penalty;
  p.frequency_penalty = f.frequency_penalty;
  p.seed = f.seed;
  p.stop = f.stop;
  p.stop_token_ids = f.stop_token_ids;
  p.ignore_eos = f.ignore_eos;
  p.max_tokens = f.max_tokens;
  p.min_tokens = f.min_tokens;
  p.skip_special_tokens = !f.keep_special_tokens;
  return p;
}

nlohmann::ordered_json result_json(const std::vector<int32_t>& token_ids, const std::string& text,
                                   const FinishEvent& fin) {
  nlohmann::ordered_json j;
  j["token_ids"] = token_ids;
  j["text"] = text;
  j["finish_reason"] = finish_reason_name(fin.reason);
  if (fin.error) {
    j["error"] = {{"code", std::string(error_code_name(fin.error->code))},
                  {"message", fin.error->message}};
  }
  j["usage"] = {{"prompt_tokens", fin.usage.prompt_tokens},
                {"completion_tokens", fin.usage.completion_tokens}};
  const RequestTimings& t = fin.timings;
  j["timings"] = {{"ttft", t.ttft_ms},
                  {"tpot", t.tpot_ms},
                  {"queue", t.queue_ms},
                  {"prefill", t.prefill_ms},
                  {"kv_ship", t.kv_ship_ms},
                  {"decode", t.decode_ms},
                  {"e2e", t.e2e_ms},
                  {"prefill_chunks", t.prefill_chunks},
                  {"decode_steps", t.decode_steps}};
  if (fin.spec) {
    j["spec"] = {{"drafts", fin.spec->drafts},
                 {"proposed", fin.spec->proposed},
                 {"accepted", fin.spec->accepted},
                 {"acceptance_rate", fin.spec->acceptance_rate()},
                 {"mean_accepted_length", fin.spec->mean_accepted_length()},
                 {"accepted_per_position", fin.spec->accepted_per_position}};
  }
  return j;
}

void print_timings(const FinishEvent& fin) {
  const RequestTimings& t = fin.timings;
  std::fprintf(stderr,
               "\n-- %d prompt + %d generated tokens, finish: %s\n"
               "   queue    %9.2f ms\n"
               "   prefill  %9.2f ms (%d chunks)\n"
               "   kv ship  %9.2f ms exposed (transfer time prefill did not hide)\n"
               "   ttft     %9.2f ms\n"
               "   decode   %9.2f ms (%d steps)\n"
               "   tpot     %9.2f ms/token (%.1f tok/s)\n"
               "   total    %9.2f ms\n",
               fin.usage.prompt_tokens, fin.usage.completion_tokens, finish_reason_name(fin.reason),
               t.queue_ms, t.prefill_ms, t.prefill_chunks, t.kv_ship_ms, t.ttft_ms, t.decode_ms,
               t.decode_steps, t.tpot_ms, t.tpot_ms > 0 ? 1000.0 / t.tpot_ms : 0.0, t.e2e_ms);
  if (fin.spec) {
    std::fprintf(stderr,
                 "   accepted %9.1f %% (%lld of %lld draft tokens; %.2f tokens a speculative "
                 "step, %lld of them)\n",
                 100.0 * fin.spec->acceptance_rate(), static_cast<long long>(fin.spec->accepted),
                 static_cast<long long>(fin.spec->proposed), fin.spec->mean_accepted_length(),
                 static_cast<long long>(fin.spec->drafts));
  }
}

}  // namespace tandem::cli
