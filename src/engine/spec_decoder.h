// Speculative decoding on the decode stage: the draft model proposes up to k tokens per
// sequence, the target scores all proposals plus one bonus position in ONE forward (ragged query
// lengths), and the lossless rule (sampling/speculative.h) accepts a prefix. Rejected positions
// are rolled back by length in both KV caches: the pages stay, num_computed moves back, and the
// next step overwrites them.
//
// The draft keeps its own KV pool and catches up lazily: each step it first computes whatever
// it has not seen (the prompt on the first step, the bonus token afterwards), so prefill on
// another stage, preemption and recompute need no extra path.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "engine/sequence.h"
#include "engine/spec_gate.h"
#include "kv/page_pool.h"
#include "model/model_dir.h"
#include "runner/runner.h"

namespace tandem {

struct SpecConfig {
  int32_t draft_max = 8;   // --draft-max
  int32_t draft_min = 1;   // --draft-min (when speculating at all)
  bool enabled = true;     // --spec off
  int32_t max_batch = 32;  // above this many running sequences, verify is compute-bound: no spec
  int32_t catchup_chunk = 512;  // draft tokens one step may catch up (a long prompt takes steps)
  // Tokens one forward of either model may carry: the runners' max_batch_tokens (0 = no
  // limit). Catch-up after the gate's plain steps (or of prompts) is split to stay within it,
  // and the verify pass's proposals are cut to fit.
  int32_t max_forward_tokens = 0;
  int32_t max_model_len = 0;  // no verified position may reach past it; 0 = no limit
  int32_t fixed_k = 0;        // benchmarks: always propose this many (0 = the adaptive policy)
  // The adaptive policy takes the smallest k whose modelled gain is within this fraction of the
  // best k's (0: the best k). For A/B runs (`bench spec --k-ties`): the model leaves out that
  // the verify pass grows with k, and its gain is flat over k = 5-7 at ~0.8 (NOTES.md v64).
  double k_tie = 0;
  // --async-decode: an all-greedy batch launches each draft round before reading the last
  // one's ids (their tokens fed on the device).
  bool async_rounds = true;
};

// Host-visible times of the last step() (ms), for benchmarks and the cost model.
struct SpecStepTimes {
  int32_t draft_rounds = 0;  // draft forwards (the largest k of the batch)
  double draft_ms = 0;       // all draft rounds, sampled rows, draws and host work between them
  double verify_ms = 0;      // the target's pass over k + 1 positions and their sampled rows
  double accept_ms = 0;      // acceptance (sampled: the target runner's, one launch on a GPU)
};

// A step's outcome into seq.spec_acceptance, the per-token acceptance a that the policy's
// E(a, k) = 1 + a + ... + a^k assumes: accepted positions over tried ones (a step accepting
// `accepted` of k proposals tried accepted + 1 positions, or k when it accepted them all), each
// count decayed as below. Accepted/proposed would be (a - a^(k+1)) / (k (1 - a)) instead:
// 0.64 for a = 0.9 and k = 8, which steers the policy to too small a k.
void observe_acceptance(Sequence& seq, int32_t k, int32_t accepted);
// The decay of observe_acceptance's counts: kAcceptanceDecay a tried position, but no faster
// than kAcceptanceStepDecay a step, so about the last ten positions count and never fewer than
// about five steps. Per step alone (0.8 until NOTES.md v32) a step of k = 1, trying one
// position, kept about five: at acceptance 0.5 the estimate swung under the ~0.24 where k = 1
// stops paying on the H200 pair and stayed there, plain steps not updating it. Per position
// alone a step of k = 8 at acceptance 0.9, trying ~6, kept about two steps.
inline constexpr double kAcceptanceDecay = 0.9;
inline constexpr double kAcceptanceStepDecay = 0.8;

// Which speculative steps are probe steps (DraftLengthPolicy::choose's `probe`; the shut gate's
// probe steps are too), on which sequences whose drafts are off propose draft_min so that
// acceptance that recovers is noticed:
// every kProbePeriod-th step while some sequence speculates on the steps between, and twice as
// long after each probe that left the whole batch plain (up to kMaxProbePeriod). With the whole
// batch plain a probe step costs the batch the draft's catch-up on every token it skipped and a
// verify pass of new shapes (graph captures): 11-17 ms for ~22 tokens against 4.03 ms for 16 in
// a plain step at batch 16 on the H200 pair, every 16 steps, where the policy kept batch 16 at
// acceptance 0.5 plain with the gate open (0.85-0.91x plain decoding; NOTES.md v49).
class ProbeSchedule {
 public:
  static constexpr int64_t kProbePeriod = 16;
  static constexpr int64_t kMaxProbePeriod = 8 * kProbePeriod;
  // Whether this speculative step probes; counts the step.
  bool next_step();
  // A step that was not a probe had a sequence speculating: probes come every kProbePeriod
  // steps again.
  void speculated();

 private:
  int64_t step_ = 0;                 // speculative steps counted so far
  int64_t next_ = kProbePeriod - 1;  // the next probe step
  int64_t period_ = kProbePeriod;    // the wait after it
};

// Chooses k per sequence from its running acceptance and the measured cost of a draft step
// relative to a target step (docs/speculative.md explains the policy).
class DraftLengthPolicy {
 public:
  explicit DraftLengthPolicy(SpecConfig config) : config_(config) {}
  // 0 = do not speculate this step; on a probe step (SpecDecoder's ProbeSchedule, or the shut
  // gate's probe) a sequence whose drafts are off proposes draft_min.
  int32_t choose(const Sequence& seq, int32_t batch_size, bool probe = false) const;
  // One k for the batch: ks holds each sequence's choose(); every speculating sequence that is
  // not reproducible() then proposes the k in [draft_min, draft_max] that maximises the batch's
  // expected tokens over the cost of a step, sum_i E(a_i, k) / (1 + k c). A step runs max(k)
  // draft rounds whatever each sequence chose, so sequences with a smaller k left tokens unasked
  // for at no saving. Reproducible sequences keep their own k (their tokens must not depend on
  // the batch); with a fixed k nothing changes.
  // Then, once the verify cost v is measured and except on probe steps (`probe`, as for
  // choose()), the sharing sequences (or a lone speculating one) all decode plainly (k = 0)
  // when the step would emit no more than plain steps do in its time: sum_i E(a_i, k) +
  // (sequences not sharing) <= n v (1 + k c) for a batch of n. The choices above take a verify pass
  // as one plain step; on the H200 it costs 1.2 at batch 1 and 1.3-1.6 at batch 16 (NOTES.md v17).
  // The batch decides, not each sequence: per sequence, one sequence's noisy estimate dipping below
  // the higher bar took it out of speculation and the batch paid its catch-up when it came back
  // (batch 16 at acceptance 0.75-0.80 went 1.19x -> 0.89x, NOTES.md v17).
  void share_k(std::span<Sequence* const> seqs, std::span<int32_t> ks, bool probe = false) const;
  // A speculative step's costs: one draft round and the target's verify pass (ms), and the
  // gate's plain step of the same batch size (SpecGate::plain_step_ms) when it has measured one.
  void observe_costs(double draft_step_ms, double verify_ms,
                     std::optional<double> plain_step_ms = std::nullopt);
  double cost_ratio() const { return cost_ratio_; }
  // v: what a verify pass costs in plain steps of its batch; 1 (and no batch-level check in
  // share_k) until a plain step was measured.
  double verify_cost() const { return verify_cost_.value_or(1.0); }
  const SpecConfig& config() const { return config_; }

  // Sampled with a seed: its tokens must not depend on timings (docs/speculative.md).
  static bool reproducible(const Sequence& seq) {
    return !seq.params.greedy() && seq.params.has_seed;
  }
  // The draft/target cost ratio such sequences choose k with, and the measurement's start.
  static constexpr double kFixedCostRatio = 0.1;

 private:
  // The k in [max(1, draft_min), draft_max] with the largest gain(k) above `floor`, or 0 where
  // none is above it; with SpecConfig::k_tie, the smallest k whose gain is above the floor and
  // within k_tie of that largest one.
  int32_t pick_k(double floor, const std::function<double(int32_t)>& gain) const;
  // Whether the sharing sequences' step with k (acceptances `shared`, in a batch of `batch`)
  // emits more than plain steps would in its time (share_k).
  bool speculation_pays(std::span<const double> shared, int32_t k, size_t batch) const;

  SpecConfig config_;
  double cost_ratio_ = kFixedCostRatio;  // draft step / target step, EMA of measurements
  // Verify pass / plain step of the same batch size, an EMA from 1 of measurements; nothing
  // until the gate has measured a plain step (no guess: the old behaviour).
  std::optional<double> verify_cost_;
  // Each measurement counts at most this much: the first verify pass of a row count pays
  // cuBLASLt's algorithm check (~13 ms on the 7B against a ~4 ms plain step, NOTES.md v6), each
  // new k and batch size meets one, and v held high by them switches batches off, after which
  // only the probes (ProbeSchedule) measure it again. Verify passes measured on the
  // H200 cost 1.2-1.6 plain steps (bf16 7B, NOTES.md v17) and 1.7 (AWQ 7B, batch 4, v12);
  // above the cap the gate, which times whole steps, still decides.
  static constexpr double kMaxVerifyCostSample = 2.0;
};

// A draft model loaded for a decode stage: its weights, its runner and its own KV pool.
struct DraftModel {
  std::unique_ptr<ModelDir> model;  // heap: runners point into its WeightStore
  std::unique_ptr<ModelRunner> runner;
  std::unique_ptr<PagePool> pool;
  SpecConfig config;
};

// The largest k' <= k that keeps `seq` within its max_tokens and the context limit
// (max_model_len, 0 = none): k proposals emit at most k + 1 tokens and grow the context the
// verify pass sees to len + k.
int32_t clip_draft_length(const Sequence& seq, int32_t k, int32_t max_model_len);

class SpecDecoder {
 public:
  SpecDecoder(ModelRunner& target, ModelRunner& draft, PagePool& draft_pool, SpecConfig config,
              int32_t valid_vocab);

  // Whether a step of these decoding sequences should take step() at all. Not when nothing can
  // be proposed (speculation off, or more sequences than SpecConfig::max_batch): the engine's
  // plain decode step then runs them, the same path and cost as without a draft, and the draft
  // catches up on the skipped tokens in chunks once a step speculates again. A batch above
  // max_batch holding a reproducible() sequence still takes step() (k = 0): a seeded sequence's
  // tokens must not depend on the batch size through the path that sampled them.
  bool wants_step(std::span<Sequence* const> seqs) const;

  // One speculative step for `seqs`, each with exactly one pending target token and target
  // pages reserved for it. Grows target pages for the proposals where the pool allows (else
  // that sequence proposes fewer). Returns the tokens each sequence emits, 1..k+1 each; the
  // caller appends them (stop conditions may cut them short) and then calls commit().
  std::vector<std::vector<int32_t>> step(std::span<Sequence* const> seqs, PagePool& target_pool,
                                         int32_t page_size);

  // After the caller appended `emitted` tokens of the step's result to seq.tokens: KV is valid
  // for all but the last token; roll both caches back to that length.
  void commit(Sequence& seq, int32_t emitted, PagePool& target_pool, int32_t page_size);

  // step() with the engine's bookkeeping: a trace span per sequence, the tokens streamed (a stop
  // condition may cut a step's tokens short), then commit() and `on_commit` (the prefix cache
  // records the new full pages) or, for a sequence that finished, `on_finish`, which must
  // release its pages.
  void run_step(std::span<Sequence* const> seqs, PagePool& target_pool, int32_t page_size,
                const std::function<void(Sequence&, FinishReason)>& on_finish,
                const std::function<void(Sequence&)>& on_commit = {});

  // A finished step's wall time (step() to the last commit(), host work included) and the
  // tokens it emitted, for the gate that decides whether this batch size speculates at all.
  // run_step() reports its own steps.
  void observe_step(int32_t batch_size, double step_ms, int64_t emitted);

  // Frees the draft pages of a finished or preempted sequence.
  void release(Sequence& seq);

  DraftLengthPolicy& policy() { return policy_; }
  // Whether the gate ran the last step without drafts (tandem:spec_decode_num_gated_steps_total).
  bool last_step_gated() const { return gated_; }
  const SpecStepTimes& last_times() const { return times_; }

  // Two-stage engines: the prefill stage reserves pages in the decode stage's pools too, so every
  // page operation here takes this mutex (null on one stage: nobody else touches the pools).
  void set_pool_mutex(std::mutex* mu) { pool_mu_ = mu; }

  // When the last step's draft work (catch-up and proposal rounds) and its target verify pass
  // ran, in trace_now_ns() time; the engine turns them into spec_draft / spec_verify spans.
  struct StepTiming {
    int64_t draft_start_ns = 0;
    int64_t draft_end_ns = 0;
    int64_t verify_start_ns = 0;
    int64_t verify_end_ns = 0;
  };
  const StepTiming& last_timing() const { return timing_; }

 private:
  std::unique_lock<std::mutex> lock_pools();
  // Which sequences' first draft round re-feeds the token before their one new token, so that
  // the round's `first_round` tokens reach a multiple of the draft runner's graph_token_bucket()
  // (within `budget`): [seq] 1 to re-feed. None where that many such sequences are lacking.
  std::vector<char> refeed_for_bucket(std::span<Sequence* const> seqs, std::span<const int32_t> ks,
                                      int64_t first_round, int64_t budget) const;

  ModelRunner& target_;
  ModelRunner& draft_;
  PagePool& draft_pool_;
  DraftLengthPolicy policy_;
  SpecGate gate_;                 // unused with a fixed k (benchmarks)
  ProbeSchedule probes_;          // over the steps the gate let speculate
  int64_t last_max_catchup_ = 0;  // the last step's largest draft catch-up of one sequence
  bool pinned_ = false;           // the last step's batch had a reproducible() sequence
  bool gated_ = false;            // the gate ran the last step without drafts
  bool captured_ = false;         // a runner captured a graph during the last step
  int32_t valid_vocab_;
  std::mutex* pool_mu_ = nullptr;
  SpecStepTimes times_;
  StepTiming timing_;
  // Frees the probability rows' storage after a burst of sampled sequences (a batch of 32 at
  // k = 8 holds ~330 MB over a 152k vocabulary, on the device with the CUDA runners): when they
  // hold more than kKeptRowBytes and the step used less than a quarter of their rows (device
  // allocations and frees synchronise: not every step).
  void release_large_rows(size_t used_rows);
  static constexpr size_t kKeptRowBytes = size_t(64) << 20;
  // Sampled sequences' probability rows, in each runner's own memory (device memory on the
  // CUDA runner) from probs_into() to accept_sampled(): no vocabulary-sized row crosses to the
  // host. Kept between steps so that they are allocated once, not every step.
  ProbRows draft_rows_;   // [sampled proposals of all rounds, W], the draft's: one slot per
                          // sampled sequence per round, each round's after the last's
  ProbRows target_rows_;  // [sampled verify rows, W], the target's: k + 1 per sampled sequence
};

}  // namespace tandem
