// A ModelRunner that passes every call to another: tests derive from it and override what they
// watch or fake (a forward counter, a reported device or memory plan).
#pragma once
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "runner/prob_rows.h"
#include "runner/runner.h"

namespace tandem::testing {

// Every call passes to `inner`; a test derives from it and overrides what it watches.
class ForwardingRunner : public ModelRunner {
 public:
  explicit ForwardingRunner(std::unique_ptr<ModelRunner> inner) : inner_(std::move(inner)) {}
  const ModelConfig& config() const override { return inner_->config(); }
  std::string device() const override { return inner_->device(); }
  int32_t page_size() const override { return inner_->page_size(); }
  int32_t num_pages() const override { return inner_->num_pages(); }
  void set_valid_vocab(int32_t v) override { inner_->set_valid_vocab(v); }
  MemoryPlan memory_plan() const override { return inner_->memory_plan(); }
  void forward(const ForwardBatch& batch) override { inner_->forward(batch); }
  int32_t decode_rows_limit() const override { return inner_->decode_rows_limit(); }
  int64_t graphs_captured() const override { return inner_->graphs_captured(); }
  int32_t graph_token_bucket() const override { return inner_->graph_token_bucket(); }
  // The asynchronous pair goes to the inner runner too: it holds the ids a fed forward reads.
  void sample_async(std::span<const SampleRequest> r) override { inner_->sample_async(r); }
  void sample_wait(std::span<int32_t> out) override { inner_->sample_wait(out); }
  void sample(std::span<const SampleRequest> r, std::span<int32_t> out) override {
    inner_->sample(r, out);
  }
  void copy_logits(std::span<float> out) override { inner_->copy_logits(out); }
  void probs(std::span<const SampleRequest> r, int32_t width, std::span<float> out,
             std::span<int32_t> draws) override {
    inner_->probs(r, width, out, draws);
  }
  ProbRows make_prob_rows(int32_t rows, int32_t width) const override {
    return inner_->make_prob_rows(rows, width);
  }
  void probs_into(std::span<const SampleRequest> r, ProbRows& rows, int32_t first_slot,
                  std::span<int32_t> draws) override {
    inner_->probs_into(r, rows, first_slot, draws);
  }
  void accept_sampled(std::span<const SampledDrafts> seqs, const ProbRows& draft_rows,
                      const ProbRows& target_rows, std::span<SpeculativeResult> out) override {
    inner_->accept_sampled(seqs, draft_rows, target_rows, out);
  }
  KvPoolView kv_pool_view() override { return inner_->kv_pool_view(); }

 private:
  std::unique_ptr<ModelRunner> inner_;
};

}  // namespace tandem::testing
