#include "engine/async_decode.h"

#include "engine/step.h"

namespace tandem {

bool AsyncDecode::eligible(std::span<const ScheduledSeq> plain, size_t running, bool speculation) {
  if (plain.empty() || plain.size() != running) return false;
  for (const ScheduledSeq& s : plain) {
    const Sequence& seq = *s.seq;
    if (s.num_tokens != 1 || seq.in_prefill() || seq.pending() != 1 ||
        (speculation && seq.speculative)) {
      return false;
    }
  }
  return true;
}

void AsyncDecode::launch(std::vector<ScheduledSeq> scheduled) {
  inflight_ = start(std::move(scheduled), {}, 0);
}

void AsyncDecode::advance(bool may_continue) {
  // The next step goes to the device before this one's tokens are read (both on one stream).
  std::optional<Step> following = may_continue ? next(*inflight_) : std::nullopt;
  complete(*inflight_);
  inflight_ = std::move(following);
}

std::shared_ptr<const DeviceInterval> launch_decode_step(ModelRunner& runner,
                                                         std::span<const ScheduledSeq> scheduled,
                                                         std::span<const int32_t> fed,
                                                         int32_t ahead) {
  // A sequence's query sits at num_computed + ahead; with ahead = 1 its token (fed) is not in
  // seq.tokens yet.
  StepBatch batch;
  for (const ScheduledSeq& s : scheduled) {
    Sequence& seq = *s.seq;
    SeqSlice slice;
    slice.q_start = int32_t(batch.tokens.size());
    slice.q_len = 1;
    slice.context_len = int32_t(seq.num_computed + ahead + 1);
    slice.pages = seq.pages.pages;
    batch.tokens.push_back(ahead > 0 ? 0 : seq.tokens[size_t(seq.num_computed)]);
    batch.logit_rows.push_back(slice.q_start);
    batch.sampling.push_back(&seq);
    batch.slices.push_back(slice);
  }
  std::vector<std::vector<int32_t>> suppress;
  std::vector<SampleRequest> requests = sample_requests(batch, ahead, suppress);
  // The fed token is the output's last, not in seq.tokens yet: the penalties count it on the
  // device.
  for (size_t i = 0; i < fed.size(); ++i) requests[i].fed = fed[i];
  ForwardBatch view = batch.view();
  view.fed = fed;
  view.greedy_next = greedy_in_row_order(requests, batch.logit_rows.size());
  runner.forward(view);
  std::shared_ptr<const DeviceInterval> device = runner.last_forward_interval();
  runner.sample_async(requests);
  return device;
}

AsyncDecode::Step AsyncDecode::start(std::vector<ScheduledSeq> scheduled,
                                     std::span<const int32_t> fed, int32_t ahead) {
  Step step;
  step.start_ns = trace_now_ns();
  for (const ScheduledSeq& s : scheduled) {
    step.ids.push_back(s.seq->id);
    step.arrivals.push_back(s.seq->arrival_order);
  }
  step.device = launch_decode_step(runner_, scheduled, fed, ahead);
  return step;
}

std::optional<AsyncDecode::Step> AsyncDecode::next(const Step& cur) {
  std::vector<ScheduledSeq> following;
  std::vector<int32_t> fed;
  for (size_t i = 0; i < cur.ids.size(); ++i) {
    Sequence* seq = hooks_.live(cur.ids[i], cur.arrivals[i]);
    if (seq == nullptr) continue;
    // cur's token (not in seq.tokens yet) is output number output_len() + 1: the last one when
    // that reaches max_tokens (admission keeps prompt + max_tokens within max_model_len).
    if (seq->output_len() + 1 >= seq->params.max_tokens) continue;
    // Room for the next token's K/V: cur writes position num_computed, the next one after it.
    if (!hooks_.reserve(*seq, seq->num_computed + 2)) return std::nullopt;
    following.push_back({seq, 1});
    fed.push_back(int32_t(i));
  }
  if (following.empty()) return std::nullopt;
  launched_++;
  return start(std::move(following), fed, 1);
}

void AsyncDecode::complete(const Step& step) {
  std::vector<int32_t> sampled(step.ids.size());
  runner_.sample_wait(sampled);
  const int64_t end_ns = trace_now_ns();
  std::vector<ScheduledSeq> done;
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < step.ids.size(); ++i) {
    if (Sequence* seq = hooks_.live(step.ids[i], step.arrivals[i])) {
      done.push_back({seq, 1});
      tokens.push_back(sampled[i]);
    }
  }
  trace_step(done, Track::kDecode, Track::kDecode, step.start_ns, end_ns, step.device);
  commit_step(done, &Sequence::pages);
  hooks_.committed(done);
  const auto now = Clock::now();
  for (size_t i = 0; i < done.size(); ++i) {
    if (auto reason = emit_token(*done[i].seq, tokens[i], now, Track::kDecode)) {
      hooks_.finish(*done[i].seq, *reason);
    }
  }
}

}  // namespace tandem
