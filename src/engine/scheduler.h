// Which sequences run in the next step, and how many of their tokens. The scheduler does the
// capacity accounting (token budget per step, max_num_seqs, KV pages through PagePool); the
// choices (who is served first, who is preempted when pages run out) are its SchedulingPolicy's,
// FCFS by default. Swap the policy without touching the engine loop.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "engine/prefix_cache.h"
#include "engine/scheduling_policy.h"
#include "engine/sequence.h"
#include "kv/page_pool.h"

namespace tandem {

struct SchedulerConfig {
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 2048;
  int32_t prefill_chunk = 512;
  int32_t page_size = 16;
};

struct ScheduledSeq {
  Sequence* seq = nullptr;
  int32_t num_tokens = 0;  // tokens [seq->num_computed, + num_tokens) run this step
};

struct SchedulePlan {
  std::vector<ScheduledSeq> batch;
  std::vector<Sequence*> preempted;  // pages released; moved back to `waiting`
  // Prefix cache lookups of the sequences admitted this step (tokens).
  int64_t cache_query_tokens = 0;  // their token counts
  int64_t cache_hit_tokens = 0;    // of which found in the cache
};

class Scheduler {
 public:
  // `table`: the block table this scheduler's pool backs (Sequence::pages on the decode stage or
  // one device, Sequence::prefill_pages on a separate prefill stage). `policy` null = FCFS.
  explicit Scheduler(SchedulerConfig config, BlockTable Sequence::*table = &Sequence::pages,
                     std::shared_ptr<const SchedulingPolicy> policy = nullptr);
  const SchedulerConfig& config() const { return config_; }
  const SchedulingPolicy& policy() const { return *policy_; }

  // running: sequences holding pages. waiting: the queue, in the policy's service order (put
  // sequences there with enqueue). Serves running sequences in service order, then admits from
  // the head of waiting; reserves the pages of everything it schedules; moves admitted sequences
  // from waiting to running and preempted ones back into waiting (where the order puts them, so
  // under FCFS they resume first).
  SchedulePlan schedule(std::deque<Sequence*>& waiting, std::vector<Sequence*>& running,
                        PagePool& pool);

  // Inserts into `waiting` at the place the policy's service order gives it.
  void enqueue(std::deque<Sequence*>& waiting, Sequence* seq) const;

  // Extra admission gate for waiting sequences (the prefill stage reserves the request's pages on
  // the decode stage here); returning false stops admission for this step.
  std::function<bool(Sequence&)> admit;
  // When set, a waiting sequence that holds no pages first shares its cached leading pages and
  // starts computing after them.
  const PrefixCache* prefix_cache = nullptr;

 private:
  int32_t tokens_for(const Sequence& seq, int32_t budget) const;
  SchedulerConfig config_;
  BlockTable Sequence::*table_;
  std::shared_ptr<const SchedulingPolicy> policy_;
};

}  // namespace tandem
