// Test driver for a ModelRunner: sequences with block tables from a PagePool, batched forwards,
// greedy decoding through ModelRunner::sample, and KV poisoning.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kv/page_pool.h"
#include "model/model_dir.h"
#include "runner/runner.h"

namespace tandem::testing {

struct TestSeq {
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  BlockTable table;
  int32_t cached = 0;  // tokens whose K/V are in the pages
};

// One sequence's part of a batched forward: its next q_len tokens.
struct StepPart {
  TestSeq* seq;
  int32_t q_len;
  bool all_logits = false;  // logits of every query token, not just the last
};

class RunnerDriver {
 public:
  // `quantization`: RunnerOptions::quantization ("fp8" quantizes a float model at load).
  RunnerDriver(const ModelDir& model, int32_t page_size, int32_t num_pages = 512,
               int32_t threads = 2, const std::string& quantization = "");

  ModelRunner& runner() { return *runner_; }
  int64_t vocab() const { return runner_->config().vocab_size; }

  // Fills every KV page of every layer with NaN: a read of a slot that was never written (or
  // of a page outside a block table) then shows up as NaN logits.
  void poison_all_pages();

  // One forward over the parts; returns [num_logits, vocab] logits, rows in part order. Each
  // sequence's pages come from the pool with a decoy page taken between reservations, so page
  // ids are not contiguous and neighbours hold poison.
  std::vector<float> step(const std::vector<StepPart>& parts);

  // Prefill `prompt` in chunks of `chunk` tokens, then greedy-decode `new_tokens`. Returns the
  // generated ids; first_logits gets the logits of the last prompt position.
  std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int32_t chunk, int32_t new_tokens,
                              std::vector<float>* first_logits);

  // Greedy token of row `row` of the last forward, through ModelRunner::sample.
  int32_t sample_greedy(int32_t row);

 private:
  std::unique_ptr<ModelRunner> runner_;
  PagePool pool_;
  std::vector<int32_t> decoys_;  // pages taken only to keep sequence pages apart
  int32_t page_size_;
};

std::string golden_model_dir(const std::string& name);
// The golden model `name` loaded (REQUIREs that it loads).
ModelDir load_golden_model(const std::string& name);
// max|a - b| / max|b|
double relative_error(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace tandem::testing
