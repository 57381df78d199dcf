// `tandem mkmodel`: a random-weight Hugging Face model directory of a real architecture's shape.
#include <cstdio>

#include "commands.h"
#include "model/mkmodel.h"
#include "model/mkmodel_quant.h"

namespace tandem::cli {

void register_mkmodel(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("mkmodel", "Write a random-weight model directory (real shapes)");
  auto opts = std::make_shared<MkModelOptions>();
  std::string presets;
  for (const std::string& p : mkmodel_presets()) presets += (presets.empty() ? "" : ", ") + p;
  cmd->add_option("--preset", opts->preset, "One of: " + presets)->required();
  cmd->add_option("--out", opts->out_dir, "Output directory")->required();
  cmd->add_option("--seed", opts->seed, "Weights are a deterministic function of the seed");
  cmd->add_option("--tokenizer", opts->tokenizer_dir,
                  "Folder with tokenizer.json / tokenizer_config.json to copy in");
  cmd->add_option("--max-shard-bytes", opts->max_shard_bytes, "Largest safetensors shard");
  std::string quantizations;
  for (const std::string& q : mkmodel::quantization_names())
    quantizations += (quantizations.empty() ? "" : ", ") + q;
  cmd->add_option("--quantization", opts->quantization,
                  "Write the decoder Linears quantized (docs/quantization.md): " + quantizations)
      ->check(CLI::IsMember(mkmodel::quantization_names()));
  auto pattern = std::make_shared<mkmodel::PatternOptions>();
  auto* pattern_seed =
      cmd->add_option("--pattern-seed", pattern->seed,
                      "Write a pattern model (docs/speculative.md): greedy output follows a "
                      "random cycle over the ids, set by this seed; untied lm_head");
  cmd->add_option("--pattern-divergence", pattern->divergence,
                  "Fraction of ids where this model jumps two steps of the cycle; a draft with "
                  "divergence D against a target with 0 accepts about 1 - D per token")
      ->needs(pattern_seed);
  cmd->add_option("--pattern-tokens", pattern->tokens,
                  "Cycle length (0 = every id below bos_token_id)")
      ->needs(pattern_seed);
  cmd->callback([opts, pattern, pattern_seed, &exit_code] {
    if (pattern_seed->count() > 0) opts->pattern = *pattern;
    Status st = make_model(*opts);
    if (!st) {
      std::fprintf(stderr, "tandem mkmodel: %s\n", st.error().to_string().c_str());
      exit_code = 1;
    }
  });
}

}  // namespace tandem::cli
