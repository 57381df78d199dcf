// What tracing costs per decode step, two ways.
//
// 1. The span path, isolated: the real per-token code (emit_token: detokenizer, stop checker,
//    observer, and its detokenize span) and the real per-step trace_step, each run with
//    --trace on and off on the same sequences; the difference is the tracing cost per
//    sequence per step (ring push of each finished trace included, one per `--tokens`).
// 2. The engine A/B: the same greedy decode loop with tracing on and off, alternated, on the
//    CPU runner; decode step time from TPOT.
// The isolated cost is then divided by decode step times: the CPU one measured here, and the
// GPU ones from benchmarks/NOTES.md (0.5B on an H200: 1.19 ms measured, 0.24 ms the target).
//
//   trace_overhead --model DIR [--batch 8] [--tokens 256] [--rounds 5] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/admission.h"
#include "engine/engine.h"
#include "engine/step.h"
#include "model/model_dir.h"
#include "tokenizer/tokenizer.h"

using namespace tandem;

namespace {

struct Discard final : EngineObserver {
  void on_tokens(TokenEvent) override {}
  void on_finished(FinishEvent) override {}
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ns per (sequence, step) of the engine's per-token work, tracing on or off: `batch` sequences
// decode `tokens` steps each (one trace_step and one emit_token per sequence per step), then
// their traces go to the ring and fresh sequences start.
double per_token_ns(bool trace, const ModelDir& model, const Tokenizer& tok, int batch, int tokens,
                    int requests) {
  Discard discard;
  TraceRing ring(256);
  double total_ns = 0;
  int64_t steps = 0;
  for (int r = 0; r < requests; ++r) {
    std::vector<std::unique_ptr<Sequence>> seqs;
    std::vector<ScheduledSeq> scheduled;
    for (int b = 0; b < batch; ++b) {
      GenerateInput in;
      in.prompt_ids = {9707, 11, 1879};
      in.sampling.temperature = 0;
      in.sampling.max_tokens = tokens + 1;
      in.sampling.ignore_eos = true;
      auto seq = new_sequence(uint64_t(r * batch + b), in, &discard, model, tok,
                              AdmissionLimits{1 << 20, 16, 1 << 20});
      if (!seq.ok()) {
        std::fprintf(stderr, "%s\n", seq.error().to_string().c_str());
        std::exit(1);
      }
      (*seq)->trace.enabled = trace;
      (*seq)->num_computed = (*seq)->prompt_len;
      seqs.push_back(std::move(*seq));
      scheduled.push_back(ScheduledSeq{seqs.back().get(), 1});
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < tokens; ++s) {
      const auto now = Clock::now();
      const int64_t ns = trace ? trace_now_ns() : 0;
      trace_step(scheduled, Track::kPrefill, Track::kDecode, ns, trace ? trace_now_ns() : 0);
      for (auto& seq : seqs) {
        // Printable ids, so the detokenizer does its real work.
        emit_token(*seq, 1000 + (s * 37) % 5000, now);
        seq->num_computed = int64_t(seq->tokens.size()) - 1;
      }
    }
    for (auto& seq : seqs) {
      if (seq->trace.enabled) ring.push(std::move(seq->trace));
    }
    total_ns +=
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    steps += int64_t(tokens) * batch;
  }
  return total_ns / double(steps);
}

// Decode step ms (TPOT) of `batch` greedy requests with tracing on or off.
double engine_step_ms(bool trace, const std::string& model_dir, int batch, int tokens,
                      int threads) {
  EngineOptions o;
  o.model_dir = model_dir;
  o.trace = trace;
  o.threads = threads;
  o.kv_pages = 4 * batch * ((tokens + 64) / 16 + 1);
  auto engine = Engine::create(o);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.error().to_string().c_str());
    std::exit(1);
  }
  struct Tpot final : EngineObserver {
    std::vector<double> tpot;
    void on_tokens(TokenEvent) override {}
    void on_finished(FinishEvent ev) override { tpot.push_back(ev.timings.tpot_ms); }
  } obs;
  for (int b = 0; b < batch; ++b) {
    GenerateInput in;
    in.prompt_ids = {9707, 11, 1879, b % 2 ? 1000 : 2000};
    in.sampling.temperature = 0;
    in.sampling.max_tokens = tokens;
    in.sampling.ignore_eos = true;
    if (!(*engine)->submit(uint64_t(b + 1), in, &obs).ok()) std::exit(1);
  }
  (*engine)->run_until_idle();
  return median(obs.tpot);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir;
  int batch = 8, tokens = 256, rounds = 5, threads = 0, engine_tokens = 32;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--model")
      model_dir = next();
    else if (a == "--batch")
      batch = std::stoi(next());
    else if (a == "--tokens")
      tokens = std::stoi(next());
    else if (a == "--engine-tokens")
      engine_tokens = std::stoi(next());
    else if (a == "--rounds")
      rounds = std::stoi(next());
    else if (a == "--threads")
      threads = std::stoi(next());
    else if (a == "--json")
      json = true;
    else {
      std::fprintf(stderr,
                   "usage: trace_overhead --model DIR [--batch B] [--tokens N] "
                   "[--engine-tokens N] [--rounds R] [--threads T] [--json]\n");
      return 2;
    }
  }
  if (model_dir.empty()) {
    std::fprintf(stderr, "--model is required (e.g. tandem mkmodel --preset tiny-qwen)\n");
    return 2;
  }
  auto model = load_model_dir(model_dir);
  auto tok = Tokenizer::load(model_dir);
  if (!model.ok() || !tok.ok()) {
    std::fprintf(stderr, "cannot load %s\n", model_dir.c_str());
    return 1;
  }

  // 1. The span path: min over rounds (the least disturbed run on a shared machine).
  std::vector<double> on_ns, off_ns;
  per_token_ns(true, *model, *tok, batch, tokens, 2);  // warm caches and allocators
  for (int r = 0; r < rounds; ++r) {
    on_ns.push_back(per_token_ns(true, *model, *tok, batch, tokens, 8));
    off_ns.push_back(per_token_ns(false, *model, *tok, batch, tokens, 8));
  }
  const double on = *std::min_element(on_ns.begin(), on_ns.end());
  const double off = *std::min_element(off_ns.begin(), off_ns.end());
  const double cost_ns = std::max(0.0, on - off);

  // 2. The engine A/B, alternated so drift hits both.
  std::vector<double> step_on, step_off;
  for (int r = 0; r < rounds; ++r) {
    step_on.push_back(engine_step_ms(true, model_dir, batch, engine_tokens, threads));
    step_off.push_back(engine_step_ms(false, model_dir, batch, engine_tokens, threads));
  }
  const double cpu_step_ms = median(step_off);
  // A decode step of a batch pays the per-sequence cost `batch` times.
  const double step_cost_us = cost_ns * batch / 1000.0;

  nlohmann::ordered_json j;
  j["benchmark"] = "trace_overhead";
  j["model"] = model_dir;
  j["batch"] = batch;
  j["span_path"] = {{"tokens_per_request", tokens},
                    {"ns_per_seq_step_trace_on", on},
                    {"ns_per_seq_step_trace_off", off},
                    {"tracing_ns_per_seq_step", cost_ns},
                    {"tracing_us_per_batch_step", step_cost_us}};
  j["engine_ab"] = {{"tokens", engine_tokens},
                    {"step_ms_trace_on_median", median(step_on)},
                    {"step_ms_trace_off_median", cpu_step_ms},
                    {"step_ms_trace_on", step_on},
                    {"step_ms_trace_off", step_off}};
  auto frac = [&](double step_ms) { return step_cost_us / (step_ms * 1000.0); };
  j["overhead_fraction"] = {{"cpu_this_model", frac(cpu_step_ms)},
                            {"h200_qwen2.5-0.5b_measured_1.19ms", frac(1.19)},
                            {"h200_qwen2.5-0.5b_target_0.24ms", frac(0.24)}};
  j["limit"] = 0.01;
  j["meets_limit"] = frac(cpu_step_ms) <= 0.01 && frac(1.19) <= 0.01;
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "tracing: %.0f ns per sequence per step (%.0f on, %.0f off); batch %d: %.2f us/step\n",
        cost_ns, on, off, batch, step_cost_us);
    std::printf("CPU step %.3f ms (on %.3f): %.4f%%; H200 0.5B 1.19 ms: %.4f%%; 0.24 ms: %.4f%%\n",
                cpu_step_ms, median(step_on), 100 * frac(cpu_step_ms), 100 * frac(1.19),
                100 * frac(0.24));
  }
  return 0;
}
