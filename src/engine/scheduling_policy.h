// Who is served first and who gives up its pages: the part of scheduling that is a choice, apart
// from the capacity accounting (token budget, max_num_seqs, KV pages) that Scheduler does. A new
// policy (priorities, shortest job first, fair share per client) implements this interface and
// registers a name in make_scheduling_policy; the engines and the scheduler stay as they are.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/error.h"
#include "engine/sequence.h"

namespace tandem {

class SchedulingPolicy {
 public:
  virtual ~SchedulingPolicy() = default;
  virtual std::string_view name() const = 0;

  // Service order: true when `a` is admitted (and given token budget) before `b`. A strict weak
  // order that does not change over a sequence's life, so a preempted sequence goes back to
  // where the order puts it.
  virtual bool before(const Sequence& a, const Sequence& b) const = 0;

  // `needy` (running) cannot get the pages it needs this step. Returns the index in `candidates`
  // (running sequences not yet scheduled this step, never empty) of the one to preempt: its
  // pages are freed and it is recomputed later with identical output.
  virtual size_t pick_victim(std::span<Sequence* const> candidates,
                             const Sequence& needy) const = 0;
};

// First come, first served: arrival order; the victim is the youngest candidate (it has the
// least work to recompute and the least waiting behind it).
class FcfsPolicy final : public SchedulingPolicy {
 public:
  std::string_view name() const override { return "fcfs"; }
  bool before(const Sequence& a, const Sequence& b) const override {
    return a.arrival_order < b.arrival_order;
  }
  size_t pick_victim(std::span<Sequence* const> candidates, const Sequence& needy) const override;
};

// The policy named by the `scheduling_policy` setting; an unknown name is kInvalidArgument
// naming the setting and the known names.
Result<std::shared_ptr<const SchedulingPolicy>> make_scheduling_policy(std::string_view name);

}  // namespace tandem
