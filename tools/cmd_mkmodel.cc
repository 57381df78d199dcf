// `tandem mkmodel`: a random-weight Hugging Face model directory of a real architecture's shape.
#include <cstdio>

#include "commands.h"
#include "model/mkmodel.h"

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
  cmd->callback([opts, &exit_code] {
    Status st = make_model(*opts);
    if (!st) {
      std::fprintf(stderr, "tandem mkmodel: %s\n", st.error().to_string().c_str());
      exit_code = 1;
    }
  });
}

}  // namespace tandem::cli
