#include "engine/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace tandem {

Scheduler::Scheduler(SchedulerConfig config, BlockTable Sequence::*table,
                     std::shared_ptr<const SchedulingPolicy> policy)
    : config_(config),
      table_(table),
      policy_(policy ? std::move(policy) : std::make_shared<const FcfsPolicy>()) {}

void Scheduler::enqueue(std::deque<Sequence*>& waiting, Sequence* seq) const {
  // After every sequence that is not served later than it: equals keep their arrival order.
  auto pos = std::find_if(waiting.begin(), waiting.end(),
                          [&](const Sequence* w) { return policy_->before(*seq, *w); });
  waiting.insert(pos, seq);
}

int32_t Scheduler::tokens_for(const Sequence& seq, int32_t budget) const {
  int64_t n = std::min<int64_t>(seq.pending(), budget);
  if (seq.in_prefill()) n = std::min<int64_t>(n, config_.prefill_chunk);
  return int32_t(n);
}

SchedulePlan Scheduler::schedule(std::deque<Sequence*>& waiting, std::vector<Sequence*>& running,
                                 PagePool& pool) {
  SchedulePlan plan;
  int32_t budget = config_.max_num_batched_tokens;

  // Running sequences first (decode tokens and continuing prefill chunks), in service order.
  std::stable_sort(running.begin(), running.end(),
                   [&](const Sequence* a, const Sequence* b) { return policy_->before(*a, *b); });
  std::vector<Sequence*> kept;
  kept.reserve(running.size());
  size_t next = 0;
  while (next < running.size()) {
    Sequence* seq = running[next++];
    const int32_t n = tokens_for(*seq, budget);
    if (n == 0) {  // budget spent: stays running, runs next step
      kept.push_back(seq);
      continue;
    }
    bool fits = (seq->*table_).reserve(pool, seq->num_computed + n, config_.page_size);
    // Out of pages: preempt a running sequence not yet scheduled this step, the policy's pick.
    while (!fits && next < running.size()) {
      const auto candidates = std::span<Sequence* const>(running).subspan(next);
      const size_t pick = policy_->pick_victim(candidates, *seq);
      TANDEM_CHECK(pick < candidates.size());
      Sequence* victim = candidates[pick];
      running.erase(running.begin() + std::ptrdiff_t(next + pick));
      (victim->*table_).release_all(pool);
      victim->num_computed = 0;
      plan.preempted.push_back(victim);
      fits = (seq->*table_).reserve(pool, seq->num_computed + n, config_.page_size);
    }
    if (!fits) {  // nothing younger to take from: this one waits for pages instead
      (seq->*table_).release_all(pool);
      seq->num_computed = 0;
      plan.preempted.push_back(seq);
      continue;
    }
    plan.batch.push_back({seq, n});
    kept.push_back(seq);
    budget -= n;
  }
  running = std::move(kept);
  for (Sequence* seq : plan.preempted) enqueue(waiting, seq);

  // Then admit waiting sequences in order while there is budget, room and pages (no skipping:
  // a large prompt at the head is not starved by small ones behind it).
  while (!waiting.empty() && budget > 0 && int32_t(running.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting.front();
    BlockTable& table = seq->*table_;
    int64_t hit = 0;
    if (prefix_cache && table.pages.empty() && seq->num_computed == 0) {
      hit = prefix_cache->match(*seq, table, pool);
      seq->num_computed = hit;
    }
    const int32_t n = tokens_for(*seq, budget);
    const bool fits = table.reserve(pool, seq->num_computed + n, config_.page_size);
    if (!fits || (admit && !admit(*seq))) {
      if (!fits && hit == 0) break;  // reserve takes nothing when it fails
      table.release_all(pool);
      if (hit > 0) seq->num_computed = 0;
      break;
    }
    if (prefix_cache) {
      seq->cached_tokens = hit;
      plan.cache_query_tokens += int64_t(seq->tokens.size());
      plan.cache_hit_tokens += hit;
    }
    waiting.pop_front();
    running.push_back(seq);
    plan.batch.push_back({seq, n});
    budget -= n;
  }
  return plan;
}

}  // namespace tandem
