// CPU reference runner speed on a real model shape: prefill of a prompt, then greedy decode of
// one sequence. Prints one JSON line. By hand only (the oracle's speed is not a test).
//
// usage: cpu_runner_bench MODEL_DIR|--preset NAME [--threads N] [--prompt N] [--decode N]
//   --preset writes a random-weight model of that shape (tandem mkmodel) to a temp folder.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kv/page_pool.h"
#include "model/mkmodel.h"
#include "model/model_dir.h"
#include "runner/runner.h"
#include "sampling/sampler.h"

using namespace tandem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int fail(const std::string& what) {
  std::fprintf(stderr, "cpu_runner_bench: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, preset;
  int threads = 0, prompt_len = 64, decode = 16;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--preset")
      preset = next();
    else if (a == "--threads")
      threads = std::atoi(next().c_str());
    else if (a == "--prompt")
      prompt_len = std::atoi(next().c_str());
    else if (a == "--decode")
      decode = std::atoi(next().c_str());
    else
      dir = a;
  }
  if (!preset.empty()) {
    dir = (std::filesystem::temp_directory_path() / ("tandem-bench-" + preset)).string();
    MkModelOptions mk;
    mk.preset = preset;
    mk.out_dir = dir;
    if (Status s = make_model(mk); !s.ok()) return fail(s.error().to_string());
  }
  if (dir.empty() || prompt_len < 1 || decode < 1) return fail("see the usage in the source");
  auto model = load_model_dir(dir);
  if (!model.ok()) return fail(model.error().to_string());
  RunnerOptions opts;
  opts.threads = threads;
  opts.num_pages = pages_for_tokens(prompt_len + decode, opts.page_size);
  auto runner = make_runner(*model, opts);
  if (!runner.ok()) return fail(runner.error().to_string());
  ModelRunner& r = **runner;

  PagePool pool(r.num_pages());
  BlockTable table;
  std::vector<int32_t> tokens;
  for (int i = 0; i < prompt_len; ++i) tokens.push_back(int32_t((i * 7919 + 13) % 1000));
  ResolvedSampling greedy;
  greedy.temperature = 0.0f;
  auto run = [&](int32_t q_start_in_seq, int32_t q_len) {
    const int32_t context = q_start_in_seq + q_len;
    if (!table.reserve(pool, context, r.page_size())) std::abort();
    SeqSlice slice{0, q_len, context, table.pages};
    const int32_t last = q_len - 1;
    ForwardBatch batch{
        std::span(tokens).subspan(size_t(q_start_in_seq), size_t(q_len)), {&slice, 1}, {&last, 1}};
    r.forward(batch);
    SampleRequest req;
    req.params = &greedy;
    int32_t next = 0;
    r.sample({&req, 1}, {&next, 1});
    tokens.push_back(next);
  };
  auto t0 = std::chrono::steady_clock::now();
  run(0, prompt_len);
  const double prefill_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < decode; ++i) run(prompt_len + i, 1);
  const double decode_s = seconds_since(t0);
  std::printf(
      "{\"model\": \"%s\", \"threads\": %d, \"prompt_tokens\": %d, \"prefill_s\": %.3f, "
      "\"prefill_tok_s\": %.1f, \"decode_tokens\": %d, \"decode_tok_s\": %.2f}\n",
      preset.empty() ? dir.c_str() : preset.c_str(), threads, prompt_len, prefill_s,
      prompt_len / prefill_s, decode, decode / decode_s);
  return 0;
}
