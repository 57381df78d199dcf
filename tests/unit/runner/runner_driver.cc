#include "runner_driver.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "sampling/sampler.h"
#include "test_paths.h"

namespace tandem::testing {

std::string golden_model_dir(const std::string& name) {
  return golden_dir() + "/models/" + name;
}

ModelDir load_golden_model(const std::string& name) {
  auto model = load_model_dir(golden_model_dir(name));
  REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().to_string()));
  return std::move(model).value();
}

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    max_diff = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(max_diff, d);
    max_ref = std::max(max_ref, std::fabs(double(b[i])));
  }
  return max_diff / max_ref;
}

RunnerDriver::RunnerDriver(const ModelDir& model, int32_t page_size, int32_t num_pages,
                           int32_t threads, const std::string& quantization)
    : pool_(num_pages), page_size_(page_size) {
  RunnerOptions opts;
  opts.quantization = quantization;
  opts.page_size = page_size;
  opts.num_pages = num_pages;
  opts.threads = threads;
  auto r = make_cpu_runner(model, opts);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().to_string()));
  runner_ = std::move(r).value();
  REQUIRE(runner_->num_pages() == num_pages);
}

void RunnerDriver::poison_all_pages() {
  KvPoolView view = runner_->kv_pool_view();
  const size_t floats = view.page_bytes / sizeof(float) * size_t(view.num_pages);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int l = 0; l < view.num_layers(); ++l) {
    std::fill_n(reinterpret_cast<float*>(view.k[size_t(l)]), floats, nan);
    std::fill_n(reinterpret_cast<float*>(view.v[size_t(l)]), floats, nan);
  }
}

std::vector<float> RunnerDriver::step(const std::vector<StepPart>& parts) {
  std::vector<int32_t> tokens;
  std::vector<SeqSlice> slices;
  std::vector<int32_t> logit_rows;
  for (const StepPart& part : parts) {
    TestSeq& s = *part.seq;
    REQUIRE(s.cached + part.q_len <= int32_t(s.tokens.size()));
    const int32_t context = s.cached + part.q_len;
    REQUIRE(s.table.reserve(pool_, context, page_size_));
    auto decoy = pool_.allocate(1);  // never in any block table
    REQUIRE(decoy.has_value());
    decoys_.push_back(decoy->front());
    SeqSlice slice;
    slice.q_start = int32_t(tokens.size());
    slice.q_len = part.q_len;
    slice.context_len = context;
    slice.pages = s.table.pages;
    for (int32_t i = 0; i < part.q_len; ++i) {
      if (part.all_logits || i == part.q_len - 1) logit_rows.push_back(int32_t(tokens.size()));
      tokens.push_back(s.tokens[size_t(s.cached + i)]);
    }
    slices.push_back(slice);
  }
  ForwardBatch batch{tokens, slices, logit_rows};
  runner_->forward(batch);
  for (const StepPart& part : parts) part.seq->cached += part.q_len;
  std::vector<float> logits(logit_rows.size() * size_t(vocab()));
  runner_->copy_logits(logits);
  return logits;
}

int32_t RunnerDriver::sample_greedy(int32_t row) {
  ResolvedSampling greedy;
  greedy.temperature = 0.0f;
  SampleRequest req;
  req.logit_index = row;
  req.params = &greedy;
  int32_t out = -1;
  runner_->sample({&req, 1}, {&out, 1});
  return out;
}

std::vector<int32_t> RunnerDriver::greedy(const std::vector<int32_t>& prompt, int32_t chunk,
                                          int32_t new_tokens, std::vector<float>* first_logits) {
  TestSeq seq;
  seq.tokens = prompt;
  std::vector<float> logits;
  while (seq.cached < int32_t(prompt.size())) {
    const int32_t q = std::min<int32_t>(chunk, int32_t(prompt.size()) - seq.cached);
    logits = step({{&seq, q}});
  }
  if (first_logits) *first_logits = logits;
  std::vector<int32_t> out;
  for (int32_t i = 0; i < new_tokens; ++i) {
    const int32_t next = sample_greedy(0);
    // sample() must agree with a plain argmax of copy_logits().
    CHECK(next == argmax_lowest(logits));
    out.push_back(next);
    seq.tokens.push_back(next);
    if (i + 1 < new_tokens) logits = step({{&seq, 1}});
  }
  seq.table.release_all(pool_);
  pool_.release(decoys_);
  decoys_.clear();
  return out;
}

}  // namespace tandem::testing
