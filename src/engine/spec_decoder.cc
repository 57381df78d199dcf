#include "engine/spec_decoder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "engine/step.h"
#include "sampling/speculative.h"

namespace tandem {

namespace {

// At least `needed` rows of `width` ids in `rows`, made by `runner`. Growth doubles (a batch
// growing a sequence at a time reallocates a few times, not every step; a device allocation and
// free each synchronise) up to `most`, the rows a full speculative batch needs, so the store
// never holds more than the larger of that and the largest step's need. `most` is
// most_seqs x rows_each in 64 bits: a configuration without a batch limit (`bench spec`'s
// fixed-k runs, max_batch 2^30) overflowed the 32-bit product (UBSan, the CLI suite).
void grow_rows(ProbRows& rows, const ModelRunner& runner, int32_t needed, int32_t width,
               int32_t most_seqs, int32_t rows_each) {
  if (rows.rows() >= needed && rows.width() == width) return;
  const int64_t most = int64_t(most_seqs) * rows_each;
  const int32_t grown =
      int32_t(std::max<int64_t>(needed, std::min<int64_t>(2 * int64_t(rows.rows()), most)));
  rows = {};  // the old rows go first: two bursts' worth is never held at once
  rows = runner.make_prob_rows(grown, width);
}

// Expected tokens emitted per step with k drafts at per-token acceptance a:
// 1 + a + a^2 + ... + a^k (the bonus or correction token always comes).
double expected_tokens(double a, int32_t k) {
  double sum = 0, term = 1;
  for (int32_t i = 0; i <= k; ++i, term *= a) sum += term;
  return sum;
}

// Eos and stop ids are banned until min_tokens outputs exist (`outputs` before this position).
std::vector<int32_t> banned_ids(const Sequence& seq, size_t outputs) {
  std::vector<int32_t> ids;
  if (int32_t(outputs) < seq.params.min_tokens) {
    ids = seq.params.eos_token_ids;
    ids.insert(ids.end(), seq.params.stop_token_ids.begin(), seq.params.stop_token_ids.end());
  }
  return ids;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void observe_acceptance(Sequence& seq, int32_t k, int32_t accepted) {
  TANDEM_CHECK(k > 0 && accepted >= 0 && accepted <= k, "%d of %d proposals accepted", accepted, k);
  const double tried = double(accepted + (accepted < k));
  const double decay = std::max(kAcceptanceStepDecay, std::pow(kAcceptanceDecay, tried));
  seq.spec_accepted_decayed = decay * seq.spec_accepted_decayed + double(accepted);
  seq.spec_tried_decayed = decay * seq.spec_tried_decayed + tried;
  seq.spec_acceptance = seq.spec_accepted_decayed / seq.spec_tried_decayed;
}

bool ProbeSchedule::next_step() {
  const bool probe = step_ >= next_;
  if (probe) {
    next_ = step_ + period_;
    period_ = std::min(2 * period_, kMaxProbePeriod);
  }
  ++step_;
  return probe;
}

void ProbeSchedule::speculated() {
  period_ = kProbePeriod;
  next_ = std::min(next_, step_ - 1 + kProbePeriod);
}

int32_t DraftLengthPolicy::choose(const Sequence& seq, int32_t batch_size, bool probe) const {
  if (!config_.enabled || config_.draft_max < 1 || batch_size > config_.max_batch) return 0;
  if (config_.fixed_k > 0) return config_.fixed_k;
  // Speed-up of k drafts over plain decoding: tokens per step over cost per step, where one
  // step costs one target pass (verifying k+1 positions costs about the same while decode is
  // bandwidth-bound) plus k draft passes.
  // A seeded sampled sequence's tokens depend on its k (each k consumes its own draws), so its
  // k must not depend on timings: it takes the fixed ratio.
  const double cost_ratio = reproducible(seq) ? kFixedCostRatio : cost_ratio_;
  const int32_t best_k = pick_k(1.0, [&](int32_t k) {
    return expected_tokens(seq.spec_acceptance, k) / (1.0 + k * cost_ratio);
  });
  // Off for this sequence: on the batch's probe steps it proposes draft_min, so acceptance that
  // recovers (the text became predictable) is noticed.
  if (best_k == 0 && probe) return std::max(1, config_.draft_min);
  return best_k;
}

void DraftLengthPolicy::share_k(std::span<Sequence* const> seqs, std::span<int32_t> ks,
                                bool probe) const {
  TANDEM_CHECK(seqs.size() == ks.size(), "%zu sequences, %zu draft lengths", seqs.size(),
               ks.size());
  if (config_.fixed_k > 0) return;
  std::vector<double> shared;  // acceptance of the sequences that share k
  int32_t shared_k = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (ks[i] > 0 && !reproducible(*seqs[i])) {
      shared.push_back(seqs[i]->spec_acceptance);
      shared_k = ks[i];
    }
  }
  if (shared.empty()) return;
  if (shared.size() >= 2) {  // one sequence: its own choice is the batch's
    shared_k = pick_k(0.0, [&](int32_t k) {
      double tokens = 0;
      for (const double a : shared) tokens += expected_tokens(a, k);
      return tokens / (1.0 + k * cost_ratio_);
    });
  }
  // A probe step speculates whatever the costs: the acceptance estimates of sequences that
  // stay plain never move, and only a probe shows that they recovered.
  if (!probe && !speculation_pays(shared, shared_k, seqs.size())) shared_k = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (ks[i] > 0 && !reproducible(*seqs[i])) ks[i] = shared_k;
  }
}

int32_t DraftLengthPolicy::pick_k(double floor, const std::function<double(int32_t)>& gain) const {
  const int32_t lo = std::max(1, config_.draft_min);
  int32_t best_k = 0;
  double best = floor;
  for (int32_t k = lo; k <= config_.draft_max; ++k) {
    const double g = gain(k);
    if (g > best) {
      best = g;
      best_k = k;
    }
  }
  if (best_k == 0 || config_.k_tie <= 0) return best_k;
  // Only with a tie (A/B runs) are the gains below the best k evaluated again: the default
  // path, run for every sequence each step, stays one pass without a buffer.
  for (int32_t k = lo; k < best_k; ++k) {
    const double g = gain(k);
    if (g > floor && g >= best * (1.0 - config_.k_tie)) return k;
  }
  return best_k;
}

bool DraftLengthPolicy::speculation_pays(std::span<const double> shared, int32_t k,
                                         size_t batch) const {
  if (!verify_cost_) return true;  // no plain step measured: the choices above stand
  // Tokens the step emits (one from each sequence not sharing k) against what plain steps
  // emit in its time: a step of k draft rounds and a verify pass costs v (1 + k c) plain steps.
  double tokens = double(batch - shared.size());
  for (const double a : shared) tokens += expected_tokens(a, k);
  return tokens > double(batch) * *verify_cost_ * (1.0 + k * cost_ratio_);
}

void DraftLengthPolicy::observe_costs(double draft_step_ms, double verify_ms,
                                      std::optional<double> plain_step_ms) {
  if (draft_step_ms <= 0 || verify_ms <= 0) return;
  cost_ratio_ = 0.9 * cost_ratio_ + 0.1 * (draft_step_ms / verify_ms);
  if (plain_step_ms && *plain_step_ms > 0) {
    const double sample = std::min(verify_ms / *plain_step_ms, kMaxVerifyCostSample);
    verify_cost_ = 0.9 * verify_cost_.value_or(1.0) + 0.1 * sample;
  }
}

int32_t clip_draft_length(const Sequence& seq, int32_t k, int32_t max_model_len) {
  const int64_t len = int64_t(seq.tokens.size());
  // Tokens the request may still emit; the step emits up to k + 1 of them.
  int64_t most = int64_t(seq.prompt_len) + seq.params.max_tokens - len - 1;
  if (max_model_len > 0) most = std::min<int64_t>(most, int64_t(max_model_len) - len);
  return int32_t(std::clamp<int64_t>(most, 0, k));
}

SpecDecoder::SpecDecoder(ModelRunner& target, ModelRunner& draft, PagePool& draft_pool,
                         SpecConfig config, int32_t valid_vocab)
    : target_(target),
      draft_(draft),
      draft_pool_(draft_pool),
      policy_(config),
      valid_vocab_(valid_vocab) {}

std::unique_lock<std::mutex> SpecDecoder::lock_pools() {
  return pool_mu_ ? std::unique_lock<std::mutex>(*pool_mu_) : std::unique_lock<std::mutex>();
}

void SpecDecoder::release(Sequence& seq) {
  auto lock = lock_pools();
  seq.draft_pages.release_all(draft_pool_);
  seq.draft_computed = 0;
}

bool SpecDecoder::wants_step(std::span<Sequence* const> seqs) const {
  const SpecConfig& c = policy_.config();
  if (!c.enabled || c.draft_max < 1) return false;  // every step plain: one path throughout
  if (int64_t(seqs.size()) <= int64_t(c.max_batch)) return true;
  return std::any_of(seqs.begin(), seqs.end(),
                     [](const Sequence* s) { return DraftLengthPolicy::reproducible(*s); });
}

std::vector<char> SpecDecoder::refeed_for_bucket(std::span<Sequence* const> seqs,
                                                 std::span<const int32_t> ks, int64_t first_round,
                                                 int64_t budget) const {
  std::vector<char> refeed(seqs.size(), 0);
  const int64_t bucket = draft_.graph_token_bucket();
  const auto proposing = std::count_if(ks.begin(), ks.end(), [](int32_t k) { return k > 0; });
  // One token a sequence is a plain decode shape, of which there are few: left as it is.
  if (bucket <= 1 || first_round <= proposing) return refeed;
  const int64_t want = (first_round + bucket - 1) / bucket * bucket;
  if (want > budget) return refeed;
  // The candidates compute one token this round and hold the K/V of the token before it, in a
  // page of their own (the draft's pool has no prefix cache). Recomputing it writes the same
  // K/V again, up to rounding: only the draft's proposals can change, never what verification
  // accepts.
  std::vector<size_t> candidates;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& seq = *seqs[i];
    if (ks[i] > 0 && int64_t(seq.tokens.size()) - seq.draft_computed == 1 &&
        seq.draft_computed >= 1) {
      candidates.push_back(i);
    }
  }
  if (int64_t(candidates.size()) < want - first_round) return refeed;
  for (int64_t j = 0; j < want - first_round; ++j) refeed[candidates[size_t(j)]] = 1;
  return refeed;
}

std::vector<std::vector<int32_t>> SpecDecoder::step(std::span<Sequence* const> seqs,
                                                    PagePool& target_pool, int32_t page_size) {
  const size_t n = seqs.size();
  const int32_t W = valid_vocab_;  // rows compared between the two models
  const int64_t graphs_before = target_.graphs_captured() + draft_.graphs_captured();
  // Per sequence: k, the proposals, and the draft's probabilities for them.
  std::vector<int32_t> ks(n);
  std::vector<std::vector<int32_t>> proposals(n);
  // [seq][k]: the slot of each sampled proposal's draft row in draft_rows_.
  std::vector<std::vector<int32_t>> draft_slots(n);
  std::vector<std::pair<Sequence*, int64_t>> catchup;  // (sequence, draft tokens to reach)
  // Whole-step costs decide whether this batch size speculates at all (SpecGate). A fixed k
  // (benchmarks) always does, and so does a batch holding a seeded sampled sequence: timings
  // must not switch its tokens between plain and speculative steps, so its k is left to the
  // policy and the step is not observed.
  pinned_ = std::any_of(seqs.begin(), seqs.end(),
                        [](const Sequence* s) { return DraftLengthPolicy::reproducible(*s); });
  bool gate_probe = false;  // a speculative probe of the shut gate
  const bool speculate =
      policy_.config().fixed_k > 0 || pinned_ || gate_.speculate(int32_t(n), &gate_probe);
  gated_ = !speculate;
  last_max_catchup_ = 0;
  // Tokens of the catch-up forward and of the first draft round (which carries each proposing
  // sequence's tokens the draft has not computed), each within the draft runner's limit.
  const int64_t budget = policy_.config().max_forward_tokens > 0
                             ? policy_.config().max_forward_tokens
                             : std::numeric_limits<int64_t>::max();
  int64_t caught = 0, first_round = 0;
  // The verify pass carries 1 + k tokens per sequence within the same limit (the engine gives
  // both runners one max_batch_tokens): proposals take what the batch's own tokens leave.
  int64_t verify_room = budget - int64_t(n);
  std::vector<int32_t> chosen(n, 0);  // the policy's k per sequence, shared across the batch
  if (speculate) {
    // Sequences whose drafts are off probe together, on the steps ProbeSchedule picks: each
    // probe pays a draft round and the draft's catch-up on the tokens it skipped, and on each
    // sequence's own schedule (its decode steps) a batch whose sequences arrived at different
    // times paid that nearly every step. A probe step is not a steady step for the gate (its
    // catch-up), so the gate never sees that cost: the schedule spaces the probes out itself
    // while they leave the whole batch plain.
    // A step the shut gate lets speculate is its probe, and a probe for the policy too: with
    // every sequence's drafts off it would otherwise propose nothing, and the gate, which sees
    // no speculative step, would stay shut on its old samples. ProbeSchedule counts only the
    // steps the gate lets speculate (two a gate probe): with the gate shut, its own probes came
    // up to 64 gate probes apart (kMaxProbePeriod / kProbeSteps), each up to 256 steps apart.
    const bool scheduled = probes_.next_step();
    const bool probe = scheduled || gate_probe;
    for (size_t i = 0; i < n; ++i) chosen[i] = policy_.choose(*seqs[i], int32_t(n), probe);
    policy_.share_k(seqs, chosen, probe);
    if (!probe && std::any_of(chosen.begin(), chosen.end(), [](int32_t k) { return k > 0; })) {
      probes_.speculated();
    }
    // The verify pass stays on the target's decode kernels: past its row limit one forward
    // costs several decode steps (the AWQ 7B at batch 4 with k = 8, 36 rows: verify 11.6 ms
    // against a 2.66 ms plain step, adaptive 0.83x; H200, NOTES.md v18). The speculating
    // sequences share what the limit leaves evenly (so their proposals fit it), and the draft
    // rounds shrink with them. A fixed k (benchmarks) and batches holding reproducible sequences
    // keep their k.
    const int64_t rows = target_.decode_rows_limit();
    const auto speculating =
        std::count_if(chosen.begin(), chosen.end(), [](int32_t k) { return k > 0; });
    if (policy_.config().fixed_k == 0 && !pinned_ && rows < budget && speculating > 0) {
      const int64_t each = std::max<int64_t>(0, rows - int64_t(n)) / speculating;
      for (int32_t& k : chosen) k = int32_t(std::min<int64_t>(k, each));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Sequence& seq = *seqs[i];
    TANDEM_CHECK(seq.pending() == 1);
    int32_t k = clip_draft_length(seq, chosen[i], policy_.config().max_model_len);
    const int64_t len = int64_t(seq.tokens.size());
    const int64_t lag = len - seq.draft_computed;  // the pending token included
    auto lock = lock_pools();
    k = int32_t(std::clamp<int64_t>(verify_room, 0, k));
    const bool over_budget = k > 0 && first_round + lag > budget;
    if (lag > policy_.config().catchup_chunk || over_budget) {
      // The draft is behind (a long prompt, or the tokens of gated plain steps): it catches up
      // in a chunk, proposing nothing this step. The pending token stays for a first round.
      const int64_t chunk =
          std::min({lag - 1, int64_t(policy_.config().catchup_chunk), budget - caught});
      if (chunk > 0 &&
          seq.draft_pages.reserve(draft_pool_, seq.draft_computed + chunk, page_size)) {
        last_max_catchup_ = std::max<int64_t>(last_max_catchup_, chunk);
        catchup.push_back({&seq, seq.draft_computed + chunk});
        caught += chunk;
      }
      ks[i] = 0;
      continue;
    }
    // Room for the proposals in both caches, else fewer of them (the draft computes its last
    // proposal's K/V in the next step's first round, below).
    while (k > 0 && !(seq.pages.reserve(target_pool, len + k, page_size) &&
                      seq.draft_pages.reserve(draft_pool_, len + k, page_size))) {
      --k;
    }
    if (k > 0) first_round += lag;
    verify_room -= k;
    ks[i] = k;
  }

  const std::vector<char> refeed = refeed_for_bucket(seqs, ks, first_round, budget);

  timing_.draft_start_ns = trace_now_ns();
  if (!catchup.empty()) {
    std::vector<int32_t> tokens;
    std::vector<SeqSlice> slices;
    for (auto& [seq, upto] : catchup) {
      SeqSlice s;
      s.q_start = int32_t(tokens.size());
      s.q_len = int32_t(upto - seq->draft_computed);
      s.context_len = int32_t(upto);
      s.pages = seq->draft_pages.pages;
      tokens.insert(tokens.end(), seq->tokens.begin() + seq->draft_computed,
                    seq->tokens.begin() + upto);
      slices.push_back(s);
      seq->draft_computed = upto;
      seq->draft_pages.num_tokens = upto;
    }
    draft_.forward(ForwardBatch{tokens, slices, {}});
  }

  // Draft: round r proposes token r of every sequence still proposing. The first round also
  // catches the draft up on tokens it has not computed (prompt, last bonus token).
  const int32_t max_k = *std::max_element(ks.begin(), ks.end());
  // Every round's sampled rows stay in draft_rows_ until acceptance: a slot per sampled
  // sequence per round, `draft_used` of them taken so far.
  const int32_t most_k = std::max(policy_.config().draft_max, policy_.config().fixed_k);
  const int32_t most_seqs = policy_.config().max_batch;
  int32_t draft_needed = 0, draft_used = 0;
  for (size_t i = 0; i < n; ++i)
    if (!seqs[i]->params.greedy()) draft_needed += ks[i];
  if (draft_needed > 0) grow_rows(draft_rows_, draft_, draft_needed, W, most_seqs, most_k);
  // An all-greedy batch pipelines its rounds, as --async-decode runs plain steps: round r + 1
  // goes to the device, its tokens fed there from round r's argmax (ForwardBatch::fed), before
  // the host reads round r's ids, so the host's turnaround between rounds overlaps the device.
  // Sampled rows draw through probs_into(), whose ids the host reads at once.
  const bool pipelined = policy_.config().async_rounds && draft_needed == 0;
  std::vector<size_t> in_flight;        // the sequences of the round whose ids are unread
  std::vector<int32_t> slot_of(n, -1);  // [seq] its request in that round, or -1
  auto read_round = [&] {
    std::vector<int32_t> ids(in_flight.size());
    draft_.sample_wait(ids);
    for (size_t j = 0; j < in_flight.size(); ++j) proposals[in_flight[j]].push_back(ids[j]);
    in_flight.clear();
  };
  const double rounds_t0 = now_ms();
  for (int32_t r = 0; r < max_k; ++r) {
    std::vector<int32_t> tokens, rows, fed;
    std::vector<SeqSlice> slices;
    std::vector<size_t> who;
    for (size_t i = 0; i < n; ++i) {
      if (ks[i] <= r) continue;
      Sequence& seq = *seqs[i];
      // The draft's view: real tokens, then its r proposals so far, the last of them still on
      // the device when its round is in flight.
      const int64_t len = int64_t(seq.tokens.size());
      const int64_t view_len = len + r;
      // A re-fed sequence's first round starts one token early (refeed_for_bucket).
      const int64_t from = seq.draft_computed - (r == 0 && refeed[i] ? 1 : 0);
      SeqSlice s;
      s.q_start = int32_t(tokens.size());
      s.q_len = int32_t(view_len - from);
      s.context_len = int32_t(view_len);
      s.pages = seq.draft_pages.pages;
      for (int64_t pos = from; pos < view_len; ++pos) {
        const size_t p = size_t(pos - len);  // the proposal's number when pos >= len
        const bool on_device = pos >= len && p >= proposals[i].size();
        tokens.push_back(pos < len ? seq.tokens[size_t(pos)] : on_device ? 0 : proposals[i][p]);
        fed.push_back(on_device ? slot_of[i] : -1);
      }
      rows.push_back(s.q_start + s.q_len - 1);
      last_max_catchup_ = std::max<int64_t>(last_max_catchup_, s.q_len - 1);
      slices.push_back(s);
      who.push_back(i);
      seq.draft_computed = view_len;
      seq.draft_pages.num_tokens = seq.draft_computed;
    }
    const bool feeds = !in_flight.empty();
    // Per row: the history the processors see (output + proposals so far) and the ids banned
    // before min_tokens. Greedy rows take the runner's sample() (on the GPU an argmax on the
    // device: only ids cross to the host); sampled rows take their probabilities and draws from
    // probs() (below).
    std::vector<std::vector<int32_t>> outs(who.size()), suppress(who.size());
    std::vector<SampleRequest> greedy_reqs, sampled_reqs;
    for (size_t j = 0; j < who.size(); ++j) {
      Sequence& seq = *seqs[who[j]];
      outs[j].assign(seq.output().begin(), seq.output().end());
      outs[j].insert(outs[j].end(), proposals[who[j]].begin(), proposals[who[j]].end());
      // A proposal still on the device is the history's last token (SampleRequest::fed).
      const int32_t pending = feeds ? slot_of[who[j]] : -1;
      suppress[j] = banned_ids(seq, outs[j].size() + (pending >= 0 ? 1 : 0));
      SampleRequest req{int32_t(j), &seq.params, TokenHistory{seq.prompt(), outs[j]}, suppress[j],
                        &seq.draft_rng};
      req.fed = pending;
      (seq.params.greedy() ? greedy_reqs : sampled_reqs).push_back(req);
    }
    ForwardBatch round{tokens, slices, rows,
                       feeds ? std::span<const int32_t>(fed) : std::span<const int32_t>()};
    // A pipelined round of plain greedy rows may take its argmax in the forward.
    round.greedy_next = pipelined && greedy_in_row_order(greedy_reqs, rows.size());
    draft_.forward(round);
    if (pipelined) {
      draft_.sample_async(greedy_reqs);
      if (feeds) read_round();
      in_flight = who;
      for (size_t j = 0; j < who.size(); ++j) slot_of[who[j]] = int32_t(j);
      continue;
    }
    std::vector<int32_t> greedy_ids(greedy_reqs.size());
    if (!greedy_reqs.empty()) draft_.sample(greedy_reqs, greedy_ids);
    // Sampled rows: the draft's processed probabilities, into this round's slots of
    // draft_rows_ (on the CUDA runner they stay on the device), and a token drawn from each,
    // one uniform of draft_rng a row, in row order: only the tokens come back.
    const int32_t first_slot = draft_used;
    std::vector<int32_t> sampled_ids(sampled_reqs.size());
    if (!sampled_reqs.empty()) {
      draft_.probs_into(sampled_reqs, draft_rows_, first_slot, sampled_ids);
      draft_used += int32_t(sampled_reqs.size());
    }
    size_t g = 0, s = 0;
    for (size_t j = 0; j < who.size(); ++j) {
      Sequence& seq = *seqs[who[j]];
      int32_t token;
      if (seq.params.greedy()) {
        token = greedy_ids[g++];
      } else {
        draft_slots[who[j]].push_back(first_slot + int32_t(s));
        token = sampled_ids[s++];
      }
      proposals[who[j]].push_back(token);
    }
  }
  if (!in_flight.empty()) read_round();
  // Every round, the host's work between them included.
  const double draft_ms = now_ms() - rounds_t0;

  // Target: one pass over [last token, proposals...] of every sequence, k+1 logit rows each.
  std::vector<int32_t> tokens, rows;
  std::vector<SeqSlice> slices;
  for (size_t i = 0; i < n; ++i) {
    Sequence& seq = *seqs[i];
    SeqSlice s;
    s.q_start = int32_t(tokens.size());
    s.q_len = 1 + ks[i];
    s.context_len = int32_t(seq.num_computed + s.q_len);
    const int32_t limit = policy_.config().max_model_len;
    TANDEM_CHECK(limit <= 0 || s.context_len <= limit,
                 "speculative verify past max_model_len: context %d > %d", s.context_len, limit);
    s.pages = seq.pages.pages;
    tokens.push_back(seq.tokens.back());
    tokens.insert(tokens.end(), proposals[i].begin(), proposals[i].end());
    for (int32_t r = 0; r < s.q_len; ++r) rows.push_back(s.q_start + r);
    slices.push_back(s);
  }
  timing_.draft_end_ns = trace_now_ns();
  const double t0 = now_ms();
  timing_.verify_start_ns = timing_.draft_end_ns;
  target_.forward(ForwardBatch{tokens, slices, rows});
  // The draft's last proposal has no K/V yet: the next step's first round computes it beside
  // the bonus token (two query tokens a sequence, a graph-replayed step on the CUDA runner), or
  // never, when the proposal is rejected. A pass of its own beside this verify (a second stream
  // of the same device) cost more than that second token: the graphed verify no longer leaves
  // gaps for it (batch 1, k = 4: 1.72-1.74x -> 1.77x fixed, 1.79x -> 1.88x adaptive; batch 4
  // fixed lost, 1.39x -> 1.32-1.36x, its first rounds being 8 tokens; H200, NOTES.md v26).
  // Greedy sequences: the target's processed argmax of each of their k + 1 rows through
  // sample(), ids only. Sampled sequences: probability rows for the rejection rule (below).
  std::vector<std::vector<int32_t>> histories(rows.size()), bans(rows.size());
  std::vector<SampleRequest> greedy_reqs;
  {
    size_t row = 0;
    for (size_t i = 0; i < n; ++i) {
      Sequence& seq = *seqs[i];
      if (!seq.params.greedy()) {
        row += size_t(ks[i]) + 1;
        continue;
      }
      for (int32_t r = 0; r <= ks[i]; ++r, ++row) {
        histories[row].assign(seq.output().begin(), seq.output().end());
        histories[row].insert(histories[row].end(), proposals[i].begin(), proposals[i].begin() + r);
        bans[row] = banned_ids(seq, histories[row].size());
        greedy_reqs.push_back(SampleRequest{int32_t(row), &seq.params,
                                            TokenHistory{seq.prompt(), histories[row]}, bans[row],
                                            &seq.rng});
      }
    }
  }
  std::vector<int32_t> target_ids(greedy_reqs.size());
  if (!greedy_reqs.empty()) target_.sample(greedy_reqs, target_ids);
  // Sampled sequences: every verify row's processed probabilities (on the runner's device), one
  // request a row; row r of a sequence sees its output plus proposals [0, r).
  std::vector<size_t> first_task(n, 0);  // index of each sequence's row 0 in the requests
  std::vector<std::vector<int32_t>> task_outs, task_bans;
  std::vector<SampleRequest> task_reqs;
  {
    size_t row = 0, count = 0;
    for (size_t i = 0; i < n; ++i)
      if (!seqs[i]->params.greedy()) count += size_t(ks[i]) + 1;
    task_outs.reserve(count);  // the requests point into these
    task_bans.reserve(count);
    for (size_t i = 0; i < n; ++i) {
      first_task[i] = task_reqs.size();
      const Sequence& seq = *seqs[i];
      if (!seq.params.greedy()) {
        for (int32_t r = 0; r <= ks[i]; ++r) {
          std::vector<int32_t>& out =
              task_outs.emplace_back(seq.output().begin(), seq.output().end());
          out.insert(out.end(), proposals[i].begin(), proposals[i].begin() + r);
          task_bans.push_back(banned_ids(seq, out.size()));
          task_reqs.push_back(SampleRequest{int32_t(row) + r, &seq.params,
                                            TokenHistory{seq.prompt(), out}, task_bans.back(),
                                            nullptr});
        }
      }
      row += size_t(ks[i]) + 1;
    }
  }
  // Into slots [0, rows) of target_rows_, where they stay (device memory on the CUDA runner).
  const int32_t target_needed = int32_t(task_reqs.size());
  if (target_needed > 0) {
    grow_rows(target_rows_, target_, target_needed, W, most_seqs, most_k + 1);
    target_.probs_into(task_reqs, target_rows_, 0, {});
  }
  const double target_ms = now_ms() - t0;
  timing_.verify_end_ns = trace_now_ns();
  // The verify's cost in plain steps needs the gate's plain steps of this batch size: none
  // measured (a fixed k, a pinned batch, the first steps), none fed. A step in which either
  // runner captured a graph (a shape's first use) feeds neither the costs nor the gate.
  captured_ = target_.graphs_captured() + draft_.graphs_captured() != graphs_before;
  if (max_k > 0 && !captured_)
    policy_.observe_costs(draft_ms / max_k, target_ms, gate_.plain_step_ms(int32_t(n)));
  const double accept_t0 = now_ms();
  // Sampled sequences: the lossless rule over both models' rows where they lie, all in one call
  // (one launch on the CUDA runner, two ints a sequence back). k == 0 is sample_token's draw
  // from target row 0.
  std::vector<SampledDrafts> sampled;
  std::vector<size_t> sampled_seq;  // [sampled] index into seqs
  for (size_t i = 0; i < n; ++i) {
    if (seqs[i]->params.greedy()) continue;
    sampled.push_back(
        SampledDrafts{proposals[i], draft_slots[i], int32_t(first_task[i]), &seqs[i]->rng});
    sampled_seq.push_back(i);
  }
  std::vector<SpeculativeResult> sampled_results(sampled.size());
  if (!sampled.empty()) target_.accept_sampled(sampled, draft_rows_, target_rows_, sampled_results);

  std::vector<std::vector<int32_t>> result(n);
  size_t g = 0, sampled_at = 0;
  for (size_t i = 0; i < n; ++i) {
    Sequence& seq = *seqs[i];
    const int32_t k = ks[i];
    SpeculativeResult accepted;
    if (seq.params.greedy()) {
      accepted = accept_greedy_ids(proposals[i], std::span(target_ids).subspan(g, size_t(k) + 1));
      g += size_t(k) + 1;
    } else {
      TANDEM_CHECK(sampled_seq[sampled_at] == i);
      accepted = std::move(sampled_results[sampled_at++]);
    }
    if (k > 0) {
      seq.spec.proposed += k;
      seq.spec.accepted += accepted.num_accepted;
      const size_t positions = size_t(std::max(policy_.config().draft_max, k));
      if (seq.spec.accepted_per_position.size() < positions) {
        seq.spec.accepted_per_position.resize(positions, 0);
      }
      for (int32_t p = 0; p < accepted.num_accepted; ++p)
        seq.spec.accepted_per_position[size_t(p)]++;
      seq.spec.drafts++;
      observe_acceptance(seq, k, accepted.num_accepted);
    }
    result[i] = std::move(accepted.tokens);
  }
  times_ = SpecStepTimes{max_k, draft_ms, target_ms, now_ms() - accept_t0};
  release_large_rows(size_t(draft_used) + size_t(target_needed));
  return result;
}

void SpecDecoder::release_large_rows(size_t used_rows) {
  const size_t held = size_t(draft_rows_.rows()) + size_t(target_rows_.rows());
  if (draft_rows_.bytes() + target_rows_.bytes() > kKeptRowBytes && used_rows * 4 < held) {
    draft_rows_ = {};
    target_rows_ = {};
  }
}

void SpecDecoder::run_step(std::span<Sequence* const> seqs, PagePool& target_pool,
                           int32_t page_size,
                           const std::function<void(Sequence&, FinishReason)>& on_finish,
                           const std::function<void(Sequence&)>& on_commit) {
  // Per sequence, what it had proposed and accepted before this step: the step's k and
  // accepted count are the differences.
  std::vector<std::pair<int64_t, int64_t>> before(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    before[i] = {seqs[i]->spec.proposed, seqs[i]->spec.accepted};
  }
  const double step_t0 = now_ms();
  std::vector<std::vector<int32_t>> emitted = step(seqs, target_pool, page_size);
  const StepTiming& t = timing_;
  int64_t emitted_tokens = 0;
  const auto now = Clock::now();
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& seq = *seqs[i];
    if (seq.trace.enabled) {
      Span draft;
      draft.name = "spec_draft";
      draft.track = Track::kDraft;
      draft.start_ns = t.draft_start_ns;
      draft.dur_ns = t.draft_end_ns - t.draft_start_ns;
      draft.index = seq.decode_steps;
      draft.tokens = int32_t(seq.spec.proposed - before[i].first);  // k
      draft.batch = int32_t(seqs.size());
      seq.trace.add(draft);
      Span verify = draft;
      verify.name = "spec_verify";
      verify.track = Track::kVerify;
      verify.start_ns = t.verify_start_ns;
      verify.dur_ns = t.verify_end_ns - t.verify_start_ns;
      verify.accepted = int32_t(seq.spec.accepted - before[i].second);
      seq.trace.add(verify);
    }
    std::optional<FinishReason> reason;
    int32_t n = 0;
    for (int32_t token : emitted[i]) {
      if ((reason = emit_token(seq, token, now, Track::kVerify, /*step_start=*/n++ == 0))) break;
    }
    emitted_tokens += n;
    if (reason) {
      on_finish(seq, *reason);
    } else {
      commit(seq, n, target_pool, page_size);
      if (on_commit) on_commit(seq);
    }
  }
  observe_step(int32_t(seqs.size()), now_ms() - step_t0, emitted_tokens);
}

void SpecDecoder::observe_step(int32_t batch_size, double step_ms, int64_t emitted) {
  // Only steady steps are measured: a speculative one in which the draft first caught up on
  // tokens it never saw (a prompt, or the tokens of the gate's plain steps) costs more than
  // speculating does. Measured on the H200 (NOTES.md v11): counting the 32-token catch-up of
  // each probe kept the gate shut at batch 1 of the bf16 pair. A steady step catches up on
  // at most the last emitted token and one plain step's. Nor a step that captured a graph: at
  // batch 16, acceptance 0.5 on the H200, `bench spec`'s untimed first passes, whose speculative
  // steps paid the captures, shut the gate in four runs of four, the timed passes in one (v49).
  constexpr int64_t kSteadyCatchup = 2;
  const bool speculated = times_.draft_rounds > 0;
  if (policy_.config().fixed_k == 0 && !pinned_ && !captured_ &&
      (!speculated || last_max_catchup_ <= kSteadyCatchup)) {
    gate_.observe(batch_size, speculated, step_ms, emitted);
  }
}

void SpecDecoder::commit(Sequence& seq, int32_t emitted, PagePool& target_pool, int32_t page_size) {
  // Tokens now end with the last emitted one, whose KV nobody computed yet.
  (void)emitted;
  auto lock = lock_pools();
  seq.num_computed = int64_t(seq.tokens.size()) - 1;
  seq.pages.num_tokens = seq.num_computed;
  seq.pages.truncate(target_pool, seq.num_computed, page_size);
  // The draft's KV is valid as far as its view agreed with the emitted tokens.
  seq.draft_computed = std::min<int64_t>(seq.draft_computed, seq.num_computed);
  seq.draft_pages.truncate(draft_pool_, seq.draft_computed, page_size);
}

}  // namespace tandem
