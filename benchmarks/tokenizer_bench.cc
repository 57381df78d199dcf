// Encodes 8 KiB prompts (code, Chinese) one at a time on one thread and prints ms/prompt and MB/s
// per kind as JSON; scripts/golden/tokenizer_hf_bench.py prints the same for HF `tokenizers`.
//   tokenizer_bench --tokenizer DIR --prompts tests/golden/tokenizer/bench_prompts.json
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

int usage() {
  std::fprintf(stderr, "usage: tokenizer_bench --tokenizer DIR --prompts FILE [--rounds N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, prompts_path;
  int rounds = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--tokenizer") {
      dir = argv[i + 1];
    } else if (flag == "--prompts") {
      prompts_path = argv[i + 1];
    } else if (flag == "--rounds") {
      rounds = std::atoi(argv[i + 1]);
    } else {
      return usage();
    }
  }
  if (dir.empty() || prompts_path.empty() || rounds <= 0) return usage();

  auto load_start = std::chrono::steady_clock::now();
  auto tok = tandem::Tokenizer::load(dir);
  if (!tok) {
    std::fprintf(stderr, "%s\n", tok.error().to_string().c_str());
    return 1;
  }
  double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_start)
          .count();
  std::ifstream in(prompts_path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto prompts = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!in || prompts.is_discarded()) {
    std::fprintf(stderr, "cannot read prompts from %s\n", prompts_path.c_str());
    return 1;
  }

  nlohmann::json result = {
      {"impl", "tandem"}, {"tokenizer", dir}, {"rounds", rounds}, {"load_ms", load_ms}};
  for (auto& [kind, list] : prompts.items()) {
    std::vector<std::string> texts = list.get<std::vector<std::string>>();
    size_t bytes = 0, tokens = 0;
    for (const auto& t : texts) {  // warm the word cache, as the HF side does
      bytes += t.size();
      tokens += tok->encode(t, false).size();
    }
    auto start = std::chrono::steady_clock::now();
    size_t sink = 0;
    for (int r = 0; r < rounds; ++r) {
      for (const auto& t : texts) sink += tok->encode(t, false).size();
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (sink != tokens * size_t(rounds)) {
      std::fprintf(stderr, "encoding is not deterministic\n");
      return 1;
    }
    double n = double(rounds) * double(texts.size());
    result["kinds"][kind] = {{"prompts", texts.size()},
                             {"bytes_per_prompt", double(bytes) / double(texts.size())},
                             {"tokens_per_prompt", double(tokens) / double(texts.size())},
                             {"ms_per_prompt", secs * 1e3 / n},
                             {"mb_per_s", double(bytes) * rounds / secs / 1e6}};
  }
  std::cout << result.dump() << "\n";
  return 0;
}
