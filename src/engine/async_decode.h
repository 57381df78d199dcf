// One decode step in flight for an engine's decode loop (--async-decode, docs/async-decode.md):
// a decode batch launches its next step, its tokens fed on the device from this step's
// (ForwardBatch::fed; penalties count them there too, SampleRequest::fed), before the host reads
// this step's tokens, so the host's per-step work (reading, detokenizing, stop checks, clients,
// the next launch) overlaps the device's.
// The one-device engine and the two-stage engine's decode stage both drive one; the engine
// supplies what touches its own state (which sequences still run, its KV pool, its finish).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "runner/runner.h"

namespace tandem {

// Launches one decode token of each scheduled sequence (its block table Sequence::pages) and
// samples them asynchronously (sample_async). `ahead` (0 or 1): tokens of each sequence still
// on the device, whose ids `fed` names as in ForwardBatch::fed (empty when ahead is 0). Returns
// the forward's device interval (null without device timing).
std::shared_ptr<const DeviceInterval> launch_decode_step(ModelRunner& runner,
                                                         std::span<const ScheduledSeq> scheduled,
                                                         std::span<const int32_t> fed,
                                                         int32_t ahead);

class AsyncDecode {
 public:
  struct Hooks {
    // The sequence of request `id` with this arrival_order if it still decodes here, else null
    // (finished, cancelled; its id may even be reused by a newer request).
    std::function<Sequence*(uint64_t id, int64_t arrival)> live;
    // Grows the sequence's block table to hold `tokens` tokens; false when out of pages.
    std::function<bool(Sequence& seq, int64_t tokens)> reserve;
    // After a step's tokens are committed (the prefix cache's full pages), before they are emitted.
    std::function<void(std::span<const ScheduledSeq> done)> committed;
    std::function<void(Sequence& seq, FinishReason reason)> finish;
  };

  // `launched`: counts the steps launched before the previous step was read.
  AsyncDecode(ModelRunner& runner, Hooks hooks, std::atomic<uint64_t>& launched)
      : runner_(runner), hooks_(std::move(hooks)), launched_(launched) {}

  // Whether a scheduled plain batch may start: one decode token for each of the stage's
  // `running` sequences (any sampling settings), none speculating when `speculation`.
  static bool eligible(std::span<const ScheduledSeq> plain, size_t running, bool speculation);

  bool in_flight() const { return inflight_.has_value(); }
  // Launches a step of `scheduled` (eligible()) from the tokens on the host.
  void launch(std::vector<ScheduledSeq> scheduled);
  // With a step in flight: launches the next one for the sequences that go on past it (when
  // `may_continue`: nothing arrived or waits, which the engine schedules first), then reads the
  // in-flight step's tokens and commits and emits them as the synchronous step does.
  void advance(bool may_continue);

 private:
  struct Step {
    // [n] in batch order, one decode token each.
    std::vector<uint64_t> ids;
    std::vector<int64_t> arrivals;
    int64_t start_ns = 0;
    std::shared_ptr<const DeviceInterval> device;
  };
  // launch_decode_step, and the step's bookkeeping.
  Step start(std::vector<ScheduledSeq> scheduled, std::span<const int32_t> fed, int32_t ahead);
  std::optional<Step> next(const Step& cur);
  void complete(const Step& step);

  ModelRunner& runner_;
  Hooks hooks_;
  std::atomic<uint64_t>& launched_;
  std::optional<Step> inflight_;
};

}  // namespace tandem
