#include "spec_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "engine/async_decode.h"
#include "engine/sequence.h"
#include "engine/spec_decoder.h"
#include "engine/step.h"
#include "kv/page_pool.h"

namespace tandem::bench {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// B sequences with prompts, both models' prompt KV computed and the first token sampled.
struct Batch {
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<Sequence*> ptrs;
};

Result<Batch> prefill(ModelRunner& target, ModelRunner& draft, PagePool& target_pool,
                      PagePool& draft_pool, int32_t batch, const SpecBenchOptions& o) {
  Batch b;
  const int32_t page = target.page_size();
  const int32_t prompt_vocab = std::min(o.valid_vocab, 100000);
  for (int32_t s = 0; s < batch; ++s) {
    auto seq = std::make_unique<Sequence>();
    seq->id = uint64_t(s);
    for (int32_t i = 0; i < o.input_len; ++i) {
      seq->tokens.push_back(int32_t((int64_t(i) * 7919 + int64_t(s) * 104729 + 13) % prompt_vocab));
    }
    seq->prompt_len = o.input_len;
    seq->params.temperature = o.temperature;
    seq->rng = SamplingRng{uint64_t(s) + 1, 0};
    seq->draft_rng = SamplingRng{uint64_t(s) + 1001, 0};
    seq->params.max_tokens = o.output_len;
    const int64_t most = int64_t(o.input_len) + o.output_len + o.ks.back() + 1;
    if (!seq->pages.reserve(target_pool, most, page) ||
        !seq->draft_pages.reserve(draft_pool, most, page)) {
      return make_error(ErrorCode::kOutOfPages, "bench spec: the KV pools cannot hold " +
                                                    std::to_string(batch) + " sequences of " +
                                                    std::to_string(most) + " tokens");
    }
    b.ptrs.push_back(seq.get());
    b.seqs.push_back(std::move(seq));
  }
  // One prompt per forward: the prefill is not what this benchmark measures.
  for (Sequence* seq : b.ptrs) {
    std::vector<ScheduledSeq> one = {{seq, o.input_len}};
    StepBatch sb = build_step_batch(one, &Sequence::pages, Clock::now());
    target.forward(sb.view());
    const std::vector<int32_t> first = sample_step(target, sb);
    SeqSlice ds = sb.slices[0];
    ds.pages = seq->draft_pages.pages;
    draft.forward(ForwardBatch{sb.tokens, std::span(&ds, 1), {}});
    commit_step(one, &Sequence::pages);
    seq->draft_computed = seq->num_computed;
    seq->draft_pages.num_tokens = seq->num_computed;
    seq->tokens.push_back(first[0]);
  }
  return b;
}

// Back to "prompt computed, first token sampled": the prompt's KV stays, later KV is rewritten.
void rewind(Batch& b, int32_t input_len) {
  for (Sequence* seq : b.ptrs) {
    seq->tokens.resize(size_t(input_len) + 1);
    seq->num_computed = input_len;
    seq->pages.num_tokens = input_len;
    seq->draft_computed = input_len;
    seq->draft_pages.num_tokens = input_len;
    seq->spec = SpecStats{};
    seq->spec_acceptance = 0.7;
    seq->decode_steps = 0;
    seq->rng.counter = 0;  // every run draws the same stream
    seq->draft_rng.counter = 0;
  }
}

std::vector<std::vector<int32_t>> outputs(const Batch& b) {
  std::vector<std::vector<int32_t>> out;
  for (const Sequence* seq : b.ptrs) out.emplace_back(seq->output().begin(), seq->output().end());
  return out;
}

// One plain decode step of `seqs` (one pending token each), as the engines run it.
void plain_step(ModelRunner& target, std::span<Sequence* const> seqs) {
  std::vector<ScheduledSeq> sched;
  for (Sequence* seq : seqs) sched.push_back({seq, 1});
  StepBatch sb = build_step_batch(sched, &Sequence::pages, Clock::now());
  target.forward(sb.view());
  const std::vector<int32_t> next = sample_step(target, sb);
  commit_step(sched, &Sequence::pages);
  for (size_t i = 0; i < sb.sampling.size(); ++i) sb.sampling[i]->tokens.push_back(next[i]);
}

// Plain decoding, one token per sequence per step. Returns the mean step time after two warm-up
// steps: the same statistic as the speculative runs' (their time over their steps; the median
// until session 20). A batch the policy leaves plain runs this very step (plain_step). With
// async_decode the steps run as the engines run them by default: step N + 1 is launched before
// step N's tokens are read, and a step's time is the span between two reads.
double run_plain(ModelRunner& target, Batch& b, const SpecBenchOptions& o) {
  double total_ms = 0;
  int32_t timed = 0;
  const int32_t steps = o.output_len - 1;
  std::vector<ScheduledSeq> sched;
  for (Sequence* seq : b.ptrs) sched.push_back({seq, 1});
  std::vector<int32_t> ids(b.ptrs.size()), fed(b.ptrs.size());
  for (size_t i = 0; i < fed.size(); ++i) fed[i] = int32_t(i);
  auto t0 = std::chrono::steady_clock::now();
  if (o.async_decode) launch_decode_step(target, sched, {}, 0);
  for (int32_t step = 0; step < steps; ++step) {
    if (o.async_decode) {
      if (step + 1 < steps) launch_decode_step(target, sched, fed, 1);
      target.sample_wait(ids);
      commit_step(sched, &Sequence::pages);
      for (size_t i = 0; i < ids.size(); ++i) b.ptrs[i]->tokens.push_back(ids[i]);
    } else {
      plain_step(target, b.ptrs);
    }
    if (step >= 2) {  // two warm-up steps
      total_ms += ms_since(t0);
      ++timed;
    }
    t0 = std::chrono::steady_clock::now();
  }
  return timed > 0 ? total_ms / timed : 0.0;
}

// TANDEM_SPEC_STEPLOG=1: a stderr line a step (batch, step, whether the gate ran it plainly,
// draft rounds, ms of the draft rounds, of the verify pass, of acceptance and of the whole step,
// tokens emitted), to see where a run's time goes step by step (NOTES.md v49's probe steps).
void log_step(size_t batch, int64_t step, const SpecDecoder* spec, double ms, int64_t tokens) {
  static const bool on = std::getenv("TANDEM_SPEC_STEPLOG") != nullptr;
  if (!on) return;
  if (spec == nullptr) {  // the engines' plain step
    std::fprintf(stderr, "STEP b=%zu s=%lld plain ms=%.3f tok=%lld\n", batch, (long long)step, ms,
                 (long long)tokens);
    return;
  }
  const SpecStepTimes& t = spec->last_times();
  std::fprintf(stderr,
               "STEP b=%zu s=%lld gated=%d k=%d draft=%.3f verify=%.3f acc=%.3f ms=%.3f tok=%lld\n",
               batch, (long long)step, int(spec->last_step_gated()), t.draft_rounds, t.draft_ms,
               t.verify_ms, t.accept_ms, ms, (long long)tokens);
}

SpecRun run_spec(ModelRunner& target, ModelRunner& draft, PagePool& target_pool,
                 PagePool& draft_pool, Batch& b, SpecConfig config, const SpecBenchOptions& o) {
  SpecDecoder spec(target, draft, draft_pool, config, o.valid_vocab);
  const int32_t page = target.page_size();
  SpecRun run;
  int64_t rounds = 0, tokens = 0, rejections = 0;
  double draft_ms = 0, verify_ms = 0, accept_ms = 0, total_ms = 0, plain_ms = 0;
  // The timed steps in which every sequence of the batch was still decoding: their tokens and ms.
  int64_t full_tokens = 0;
  double full_ms = 0;
  // A timed step's ms and tokens into the run's totals (and the full batch's, where it was).
  auto tally = [&](double ms, int64_t n, bool full) {
    total_ms += ms;
    tokens += n;
    if (full) {
      full_ms += ms;
      full_tokens += n;
    }
    run.steps++;
  };
  for (int64_t step = 0;; ++step) {
    std::vector<Sequence*> active;
    for (Sequence* seq : b.ptrs) {
      if (seq->output_len() < o.output_len) active.push_back(seq);
    }
    if (active.empty()) break;
    const bool full = active.size() == b.ptrs.size();
    std::vector<int64_t> proposed, accepted;
    for (Sequence* seq : active) {
      // The pending token's slot, as the engine's scheduler reserves it (commit() released
      // whole pages past the computed length; the pools were sized for the worst case).
      TANDEM_CHECK(seq->pages.reserve(target_pool, int64_t(seq->tokens.size()), page));
      proposed.push_back(seq->spec.proposed);
      accepted.push_back(seq->spec.accepted);
    }
    const int64_t graphs_before = target.graphs_captured() + draft.graphs_captured();
    const auto t0 = std::chrono::steady_clock::now();
    if (!spec.wants_step(active)) {  // nothing to propose: the engines' plain step
      plain_step(target, active);
      const double ms = ms_since(t0);
      log_step(active.size(), step, nullptr, ms, int64_t(active.size()));
      if (step == 0) continue;
      run.timed_captures += target.graphs_captured() + draft.graphs_captured() - graphs_before;
      run.plain_steps++;
      verify_ms += ms;
      plain_ms += ms;
      tally(ms, int64_t(active.size()), full);
      continue;
    }
    const std::vector<std::vector<int32_t>> emitted = spec.step(active, target_pool, page);
    int64_t step_tokens = 0;
    for (size_t i = 0; i < active.size(); ++i) {
      Sequence& seq = *active[i];
      const int32_t room = o.output_len - seq.output_len();
      const int32_t n = std::min<int32_t>(room, int32_t(emitted[i].size()));
      seq.tokens.insert(seq.tokens.end(), emitted[i].begin(), emitted[i].begin() + n);
      spec.commit(seq, n, target_pool, page);
      step_tokens += n;
      if (seq.spec.accepted - accepted[i] < seq.spec.proposed - proposed[i]) ++rejections;
    }
    const double ms = ms_since(t0);
    log_step(active.size(), step, &spec, ms, step_tokens);
    spec.observe_step(int32_t(active.size()), ms, step_tokens);  // the adaptive gate
    if (step == 0) continue;  // warm-up: first use of these shapes
    run.timed_captures += target.graphs_captured() + draft.graphs_captured() - graphs_before;
    const SpecStepTimes& t = spec.last_times();
    rounds += t.draft_rounds;
    run.plain_steps += t.draft_rounds == 0;
    if (t.draft_rounds == 0) plain_ms += ms;
    draft_ms += t.draft_ms;
    verify_ms += t.verify_ms;
    accept_ms += t.accept_ms;
    tally(ms, step_tokens, full);
  }
  int64_t all_proposed = 0, all_accepted = 0, seq_steps = 0;
  for (const Sequence* seq : b.ptrs) {
    all_proposed += seq->spec.proposed;
    all_accepted += seq->spec.accepted;
    seq_steps += seq->spec.drafts;
  }
  run.k = config.fixed_k > 0 ? config.fixed_k : config.draft_max;
  run.mode = config.fixed_k > 0 ? "fixed" : "adaptive";
  run.k_tie = config.k_tie;
  const double steps = double(std::max<int64_t>(1, run.steps));
  run.draft_step_ms = rounds ? draft_ms / double(rounds) : 0.0;
  run.verify_ms = verify_ms / steps;
  run.accept_ms = accept_ms / steps;
  run.step_ms = total_ms / steps;
  run.acceptance_rate = all_proposed ? double(all_accepted) / double(all_proposed) : 0.0;
  run.token_acceptance =
      all_accepted + rejections ? double(all_accepted) / double(all_accepted + rejections) : 0.0;
  run.tokens_per_step = seq_steps ? double(all_accepted + seq_steps) / double(seq_steps) : 1.0;
  run.mean_k = seq_steps ? double(all_proposed) / double(seq_steps) : 0.0;
  run.plain_step_ms = run.plain_steps ? plain_ms / double(run.plain_steps) : 0.0;
  run.cost_ratio = spec.policy().cost_ratio();
  run.verify_cost = spec.policy().verify_cost();
  run.tok_per_s = total_ms > 0 ? 1000.0 * double(tokens) / total_ms : 0.0;
  run.full_batch_tok_per_s = full_ms > 0 ? 1000.0 * double(full_tokens) / full_ms : 0.0;
  return run;
}

}  // namespace

Result<std::vector<SpecBatchResult>> run_spec_bench(ModelRunner& target, ModelRunner& draft,
                                                    const SpecBenchOptions& opts) {
  SpecBenchOptions o = opts;
  if (o.input_len < 1 || o.output_len < 4 || o.batch_sizes.empty() || o.ks.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "bench spec: --input-len >= 1, --output-len >= 4, a batch size and a k");
  }
  std::sort(o.ks.begin(), o.ks.end());
  if (o.ks.front() < 1) return make_error(ErrorCode::kInvalidArgument, "bench spec: k >= 1");
  for (const double tie : o.k_ties) {
    if (!(tie >= 0 && tie < 1)) {  // NaN too
      return make_error(ErrorCode::kInvalidArgument,
                        "bench spec: --k-ties " + std::to_string(tie) + ": each in [0, 1)");
    }
  }
  if (o.k_ties.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "bench spec: --k-ties needs a value");
  }
  if (target.page_size() != draft.page_size()) {
    return make_error(ErrorCode::kInvalidArgument, "bench spec: page sizes differ");
  }
  if (o.valid_vocab <= 0) {
    o.valid_vocab = int32_t(std::min(target.config().vocab_size, draft.config().vocab_size));
  }
  if (o.draft_vocab < 0 || o.draft_vocab > o.valid_vocab) {
    return make_error(ErrorCode::kInvalidArgument,
                      "bench spec: --draft-vocab " + std::to_string(o.draft_vocab) +
                          ": must be between 0 (all) and " + std::to_string(o.valid_vocab));
  }
  target.set_valid_vocab(o.valid_vocab);
  draft.set_valid_vocab(o.draft_vocab > 0 ? o.draft_vocab : o.valid_vocab);
  std::vector<SpecBatchResult> results;
  for (int32_t batch : o.batch_sizes) {
    PagePool target_pool(target.num_pages()), draft_pool(draft.num_pages());
    TANDEM_ASSIGN_OR_RETURN(Batch b, prefill(target, draft, target_pool, draft_pool, batch, o));
    SpecBatchResult r;
    r.batch_size = batch;
    rewind(b, o.input_len);
    r.plain_step_ms = run_plain(target, b, o);
    r.plain_tok_per_s = r.plain_step_ms > 0 ? 1000.0 * batch / r.plain_step_ms : 0.0;
    const auto want = outputs(b);
    std::vector<SpecConfig> configs;
    for (int32_t k : o.ks) {
      SpecConfig c;
      c.draft_min = 1;
      c.draft_max = k;
      c.fixed_k = k;
      c.max_batch = 1 << 30;
      c.max_forward_tokens = o.max_forward_tokens;
      c.async_rounds = o.async_decode;
      configs.push_back(c);
    }
    for (const double tie : o.k_ties) {
      SpecConfig adaptive;
      adaptive.draft_min = 1;
      adaptive.draft_max = o.ks.back();
      adaptive.max_batch = o.spec_max_batch;
      adaptive.max_forward_tokens = o.max_forward_tokens;
      adaptive.async_rounds = o.async_decode;
      adaptive.k_tie = tie;
      configs.push_back(adaptive);
    }
    for (const SpecConfig& c : configs) {
      // The CUDA runner captures a graph the first time it meets a shape, and a run meets new
      // ones after its first step: the adaptive run's k values the fixed runs did not take (3,
      // 5-7 of --ks 1,2,4,8), and the decode attention's slice count, part of the graph key, as
      // the contexts grow across its tiles (a fixed k = 8 run recaptured its verify every 6-7
      // steps, 6.7-7.5 ms against 5.12 on an H100; NOTES.md v51). Inside the timed steps captures
      // took batch 1's adaptive step from 6.27 to 6.91 ms (1.81x against 2.01x; H200, v31). A
      // server captures each shape once, so every run has one untimed pass first: the steady state
      // is what is reported.
      rewind(b, o.input_len);
      run_spec(target, draft, target_pool, draft_pool, b, c, o);
      rewind(b, o.input_len);
      SpecRun run = run_spec(target, draft, target_pool, draft_pool, b, c, o);
      run.outputs_match = outputs(b) == want;
      run.speedup = r.plain_tok_per_s > 0 ? run.tok_per_s / r.plain_tok_per_s : 0.0;
      run.full_batch_speedup =
          r.plain_tok_per_s > 0 ? run.full_batch_tok_per_s / r.plain_tok_per_s : 0.0;
      r.runs.push_back(run);
    }
    rewind(b, o.input_len);
    r.plain_after_step_ms = run_plain(target, b, o);
    const double bracket_ms = 0.5 * (r.plain_step_ms + r.plain_after_step_ms);
    for (SpecRun& run : r.runs) {
      run.speedup_bracketed = bracket_ms > 0 ? run.tok_per_s * bracket_ms / (1000.0 * batch) : 0.0;
    }
    for (Sequence* seq : b.ptrs) {
      seq->pages.release_all(target_pool);
      seq->draft_pages.release_all(draft_pool);
    }
    results.push_back(std::move(r));
  }
  return results;
}

std::string spec_bench_json(const SpecBenchOptions& o, const std::vector<SpecBatchResult>& results,
                            const std::string& target_label, const std::string& draft_label) {
  nlohmann::ordered_json j;
  j["target"] = target_label;
  j["draft"] = draft_label;
  j["input_len"] = o.input_len;
  j["output_len"] = o.output_len;
  j["temperature"] = o.temperature;
  j["async_decode"] = o.async_decode;
  j["draft_vocab"] = o.draft_vocab;
  j["results"] = nlohmann::ordered_json::array();
  for (const SpecBatchResult& r : results) {
    nlohmann::ordered_json b;
    b["batch_size"] = r.batch_size;
    b["plain"] = {{"step_ms", r.plain_step_ms},
                  {"tok_per_s", r.plain_tok_per_s},
                  {"step_ms_after", r.plain_after_step_ms}};
    b["spec"] = nlohmann::ordered_json::array();
    for (const SpecRun& s : r.runs) {
      b["spec"].push_back(
          {{"mode", s.mode},
           {"k", s.k},
           {"k_tie", s.k_tie},
           {"steps", s.steps},
           {"plain_steps", s.plain_steps},
           {"draft_step_ms", s.draft_step_ms},
           {"verify_ms", s.verify_ms},
           {"accept_ms", s.accept_ms},
           {"step_ms", s.step_ms},
           {"acceptance_rate", s.acceptance_rate},
           {"token_acceptance", s.token_acceptance},
           {"tokens_per_step", s.tokens_per_step},
           {"mean_k", s.mean_k},
           {"plain_step_ms", s.plain_step_ms},
           {"cost_ratio", s.cost_ratio},
           {"verify_cost", s.verify_cost},
           {"tok_per_s", s.tok_per_s},
           {"speedup", s.speedup},
           {"speedup_bracketed", s.speedup_bracketed},
           {"full_batch_tok_per_s", s.full_batch_tok_per_s},
           {"full_batch_speedup", s.full_batch_speedup},
           {"timed_captures", s.timed_captures},
           {"outputs_match", o.temperature > 0.0f ? nlohmann::ordered_json(nullptr)
                                                  : nlohmann::ordered_json(s.outputs_match)}});
    }
    j["results"].push_back(std::move(b));
  }
  return j.dump();
}

}  // namespace tandem::bench
