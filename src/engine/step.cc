#include "engine/step.h"

namespace tandem {

StepBatch build_step_batch(std::span<const ScheduledSeq> scheduled, BlockTable Sequence::*table,
                           Clock::time_point now) {
  StepBatch b;
  for (const ScheduledSeq& s : scheduled) {
    Sequence& seq = *s.seq;
    if (!seq.first_scheduled) seq.first_scheduled = now;
    SeqSlice slice;
    slice.q_start = int32_t(b.tokens.size());
    slice.q_len = s.num_tokens;
    slice.context_len = int32_t(seq.num_computed + s.num_tokens);
    slice.pages = (seq.*table).pages;
    b.tokens.insert(b.tokens.end(), seq.tokens.begin() + seq.num_computed,
                    seq.tokens.begin() + seq.num_computed + s.num_tokens);
    if (seq.num_computed + s.num_tokens == int64_t(seq.tokens.size())) {
      b.logit_rows.push_back(slice.q_start + slice.q_len - 1);
      b.sampling.push_back(&seq);
    }
    if (seq.in_prefill()) seq.prefill_chunks++;
    b.slices.push_back(slice);
  }
  return b;
}

namespace {

// Eos and stop ids, banned while fewer than min_tokens outputs exist.
std::vector<int32_t> banned_before_min_tokens(const Sequence& seq, int32_t ahead) {
  std::vector<int32_t> ids;
  if (seq.output_len() + ahead < seq.params.min_tokens) {
    ids = seq.params.eos_token_ids;
    ids.insert(ids.end(), seq.params.stop_token_ids.begin(), seq.params.stop_token_ids.end());
  }
  return ids;
}

}  // namespace

std::vector<SampleRequest> sample_requests(const StepBatch& batch, int32_t ahead,
                                           std::vector<std::vector<int32_t>>& suppress) {
  const size_t n = batch.sampling.size();
  suppress.assign(n, {});
  std::vector<SampleRequest> requests(n);
  for (size_t i = 0; i < n; ++i) {
    Sequence& seq = *batch.sampling[i];
    suppress[i] = banned_before_min_tokens(seq, ahead);
    requests[i] = SampleRequest{int32_t(i), &seq.params, TokenHistory{seq.prompt(), seq.output()},
                                suppress[i], &seq.rng};
  }
  return requests;
}

std::vector<int32_t> sample_step(ModelRunner& runner, const StepBatch& batch) {
  std::vector<std::vector<int32_t>> suppress;
  const std::vector<SampleRequest> requests = sample_requests(batch, 0, suppress);
  std::vector<int32_t> sampled(requests.size());
  if (!requests.empty()) runner.sample(requests, sampled);
  return sampled;
}

void trace_step(std::span<const ScheduledSeq> scheduled, Track prefill, Track decode,
                int64_t start_ns, int64_t end_ns, std::shared_ptr<const DeviceInterval> device) {
  const int32_t batch = int32_t(scheduled.size());
  for (const ScheduledSeq& s : scheduled) {
    Sequence& seq = *s.seq;
    if (!seq.trace.enabled) continue;
    Span span;
    const bool is_prefill = seq.in_prefill() || s.num_tokens > 1;
    span.name = is_prefill ? "prefill_chunk" : "decode_step";
    span.track = is_prefill ? prefill : decode;
    span.start_ns = start_ns;
    span.dur_ns = end_ns - start_ns;
    span.index = is_prefill ? seq.prefill_chunks - 1 : seq.decode_steps;
    span.tokens = s.num_tokens;
    span.batch = batch;
    span.device = device;
    seq.trace.add(span);
  }
}

void Telemetry::on_finish(Sequence& seq, const FinishEvent& ev) {
  const RequestTimings& t = ev.timings;
  if (seq.first_scheduled) metrics.queue_time.observe(t.queue_ms / 1e3);
  if (seq.prefill_done) metrics.prefill_time.observe(t.prefill_ms / 1e3);
  if (seq.first_token) {
    metrics.ttft.observe(t.ttft_ms / 1e3);
    metrics.decode_time.observe(t.decode_ms / 1e3);
  }
  if (ev.usage.completion_tokens > 1) metrics.itl.observe(t.tpot_ms / 1e3);
  metrics.e2e.observe(t.e2e_ms / 1e3);
  metrics.prompt_tokens += uint64_t(ev.usage.prompt_tokens);
  metrics.generation_tokens += uint64_t(ev.usage.completion_tokens);
  metrics.preemptions += uint64_t(seq.preemptions);
  metrics.count_finished(finish_reason_name(ev.reason));
  if (ev.spec) {
    metrics.spec_drafts += uint64_t(ev.spec->drafts);
    metrics.spec_draft_tokens += uint64_t(ev.spec->proposed);
    metrics.spec_accepted_tokens += uint64_t(ev.spec->accepted);
    metrics.count_accepted_per_position(ev.spec->accepted_per_position);
  }

  RequestTrace& tr = seq.trace;
  tr.request_id = seq.id;
  tr.arrival_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(seq.arrival.time_since_epoch()).count();
  tr.finish_ns = trace_now_ns();
  tr.prompt_tokens = ev.usage.prompt_tokens;
  tr.completion_tokens = ev.usage.completion_tokens;
  tr.finish_reason = finish_reason_name(ev.reason);
  if (!tr.enabled) return;
  // Every forward of this request has run (its last token was sampled, or it was cancelled and
  // its work drained), so the device intervals resolve here rather than on a later query.
  tr.resolve_device_times();
  if (seq.first_scheduled) {
    Span q;
    q.name = "queue";
    q.track = Track::kDaemon;
    q.start_ns = tr.arrival_ns;
    q.dur_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(*seq.first_scheduled - seq.arrival)
            .count();
    tr.add(q);
  }
  traces.push(std::move(tr));
}

std::string Telemetry::metrics_text(const EngineStatus& s) {
  GaugeValues g{s.running, s.waiting, {}};
  for (const PoolStatus& p : s.pools)
    g.pools.push_back({p.name, p.used_pages, p.cached_pages, p.total_pages});
  return render_prometheus(metrics, g);
}

std::string Telemetry::trace_json(std::optional<uint64_t> request_id, size_t last_n) const {
  return chrome_trace_json(traces.snapshot(request_id, last_n));
}

void commit_step(std::span<const ScheduledSeq> scheduled, BlockTable Sequence::*table) {
  for (const ScheduledSeq& s : scheduled) {
    s.seq->num_computed += s.num_tokens;
    (s.seq->*table).num_tokens = s.seq->num_computed;
  }
}

std::optional<FinishReason> emit_token(Sequence& seq, int32_t token, Clock::time_point now,
                                       Track track, bool step_start) {
  if (!seq.prefill_done) seq.prefill_done = now;
  if (!seq.first_token) seq.first_token = now;
  if (step_start && seq.output_len() > 0) seq.decode_steps++;
  seq.tokens.push_back(token);
  Span detok;
  detok.name = "detokenize";
  detok.track = track;
  detok.index = seq.output_len() - 1;
  detok.tokens = 1;
  if (seq.trace.enabled) detok.start_ns = trace_now_ns();
  const std::string piece = seq.detok->push(token);
  StopChecker::Verdict verdict = seq.stop->push(token, piece, seq.output_len());
  if (seq.trace.enabled) {
    detok.dur_ns = trace_now_ns() - detok.start_ns;
    seq.trace.add(detok);
  }
  seq.observer->on_tokens(TokenEvent{seq.id, {token}, std::move(verdict.text)});
  return verdict.finished;
}

FinishEvent make_finish_event(Sequence& seq, FinishReason reason, std::optional<Error> error,
                              Clock::time_point now) {
  FinishEvent ev;
  ev.request_id = seq.id;
  ev.reason = reason;
  ev.error = std::move(error);
  ev.usage.prompt_tokens = seq.prompt_len;
  ev.usage.completion_tokens = seq.output_len();
  RequestTimings& t = ev.timings;
  t.queue_ms = seq.first_scheduled ? ms_between(seq.arrival, *seq.first_scheduled) : 0;
  t.prefill_ms = (seq.first_scheduled && seq.prefill_done)
                     ? ms_between(*seq.first_scheduled, *seq.prefill_done)
                     : 0;
  t.kv_ship_ms = seq.kv_ship_exposed_ms;
  t.ttft_ms = seq.first_token ? ms_between(seq.arrival, *seq.first_token) : 0;
  t.decode_ms = seq.first_token ? ms_between(*seq.first_token, now) : 0;
  t.tpot_ms = seq.output_len() > 1 ? t.decode_ms / double(seq.output_len() - 1) : 0;
  t.e2e_ms = ms_between(seq.arrival, now);
  t.prefill_chunks = seq.prefill_chunks;
  t.decode_steps = seq.decode_steps;
  if (seq.speculative) ev.spec = seq.spec;
  if (reason != FinishReason::kError) ev.text_tail = seq.stop->flush(seq.detok->flush());
  return ev;
}

}  // namespace tandem
