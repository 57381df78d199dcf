// The pieces of one engine step that every stage shares: turn a schedule into a ForwardBatch,
// sample the sequences that caught up, append and stream their tokens, build finish events.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "runner/runner.h"
#include "trace/metrics.h"
#include "trace/trace.h"

namespace tandem {

struct StepBatch {
  std::vector<int32_t> tokens;      // [num_tokens] ids, sequences back to back
  std::vector<SeqSlice> slices;     // [num_seqs]
  std::vector<int32_t> logit_rows;  // [num_samples] last row of each sequence that samples
  std::vector<Sequence*> sampling;  // [num_samples]

  ForwardBatch view() const { return ForwardBatch{tokens, slices, logit_rows}; }
};

// `table` picks the block table the pages come from (the stage's pool). A sequence samples this
// step when its computed tokens catch up with its token list.
StepBatch build_step_batch(std::span<const ScheduledSeq> scheduled, BlockTable Sequence::*table,
                           Clock::time_point now);

// After runner.forward(batch.view()): one token per sampling sequence. Eos and stop ids are
// banned until min_tokens outputs exist.
std::vector<int32_t> sample_step(ModelRunner& runner, const StepBatch& batch);

// The SampleRequests of sample_step, for sequences with `ahead` sampled tokens not yet in their
// token lists (an asynchronous step's): their eos / stop ban counts those outputs too. The
// requests point into `suppress` (filled here) and into each sequence.
std::vector<SampleRequest> sample_requests(const StepBatch& batch, int32_t ahead,
                                           std::vector<std::vector<int32_t>>& suppress);

// Adds a span for this step to every scheduled sequence's trace: prefill chunks on `prefill`,
// decode tokens on `decode`. Call before commit_step (it reads what was pending). `device`: the
// step's forward on the device (ModelRunner::last_forward_interval), which replaces the host's
// start/end when the request's trace is finished.
void trace_step(std::span<const ScheduledSeq> scheduled, Track prefill, Track decode,
                int64_t start_ns, int64_t end_ns,
                std::shared_ptr<const DeviceInterval> device = nullptr);

// Marks the scheduled tokens computed in `table`.
void commit_step(std::span<const ScheduledSeq> scheduled, BlockTable Sequence::*table);

// Appends a sampled token, streams its text to the observer, checks stop conditions. Returns the
// finish reason when the sequence is done. The detokenize span goes on `track` (the stage that
// sampled the token). `step_start`: the first token a decode step emits for the sequence, which
// counts the step (a speculative step emits its accepted tokens after it with false).
std::optional<FinishReason> emit_token(Sequence& seq, int32_t token, Clock::time_point now,
                                       Track track = Track::kDecode, bool step_start = true);

// Metrics and the trace ring shared by every engine: observes a finished request.
struct Telemetry {
  EngineMetrics metrics;
  TraceRing traces{256};
  void on_finish(Sequence& seq, const FinishEvent& ev);
  std::string metrics_text(const EngineStatus& status);
  std::string trace_json(std::optional<uint64_t> request_id, size_t last_n) const;
  void add_spans(uint64_t request_id, const std::vector<Span>& spans) {
    traces.append(request_id, spans);
  }
};

// The finish event of a sequence (usage, timings, the text held back until now).
FinishEvent make_finish_event(Sequence& seq, FinishReason reason, std::optional<Error> error,
                              Clock::time_point now);

}  // namespace tandem
