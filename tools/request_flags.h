// Prompt and sampling flags shared by `tandem run` and `tandem generate`, and the JSON both print
// (the CLI contract in DESIGN.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/events.h"
#include "engine/frontend.h"
#include "sampling/sampling_params.h"

namespace tandem::cli {

struct RequestFlags {
  std::string prompt;
  std::string prompt_ids;     // "1,2,3"
  std::string messages_file;  // JSON array of messages, or {"messages": [...]}
  bool no_generation_prompt = false;
  int32_t max_tokens = 16;
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int32_t> top_k;
  float presence_penalty = 0, frequency_penalty = 0;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int32_t min_tokens = 0;
  bool keep_special_tokens = false;
};

void add_request_flags(CLI::App* cmd, RequestFlags& flags);
// Exactly one of --prompt, --prompt-ids, --messages; reads the messages file.
Result<PromptInput> prompt_input(const RequestFlags& flags);
SamplingParams sampling_params(const RequestFlags& flags);

// The JSON object `run --json` and `generate --json` print.
nlohmann::ordered_json result_json(const std::vector<int32_t>& token_ids, const std::string& text,
                                   const FinishEvent& finished);

// The per-stage timings table `run` and `generate --timings` print to stderr.
void print_timings(const FinishEvent& finished);

}  // namespace tandem::cli
