// The latency benchmark's two decode loops on the CPU runner: the asynchronous one (the next
// step launched, fed its tokens by the runner, before this step's ids are read; the engine's
// default) must decode the tokens the synchronous one does, penalties included.
#include <doctest/doctest.h>

#include <algorithm>

#include "latency.h"
#include "model/model_dir.h"
#include "test_paths.h"

using namespace tandem;
using namespace tandem::bench;

namespace {

// The tokens; `promised`: the forwards whose ForwardBatch::greedy_next the runner saw kept.
std::vector<std::vector<int32_t>> decode(const ModelDir& model, LatencyOptions o,
                                         int64_t* promised = nullptr) {
  RunnerOptions ro;
  ro.page_size = 4;
  ro.num_pages = latency_pages_per_seq(o, ro.page_size) * o.batch_size;
  ro.max_batch_tokens = std::max(o.input_len, o.batch_size * o.query_len);
  ro.max_seqs = o.batch_size;
  ro.max_logit_rows = o.batch_size * o.query_len;
  ro.threads = 2;
  auto runner = make_cpu_runner(model, ro);
  REQUIRE_MESSAGE(runner.ok(), (runner.ok() ? "" : runner.error().to_string()));
  auto res = run_latency(**runner, o, 1);
  REQUIRE_MESSAGE(res.ok(), (res.ok() ? "" : res.error().to_string()));
  CHECK(res->tpot_ms > 0);
  if (promised != nullptr) *promised = (*runner)->greedy_next_kept();
  return res->outputs;
}

}  // namespace

TEST_CASE("the asynchronous decode loop gives the synchronous loop's tokens") {
  auto model = load_model_dir(testing::golden_dir() + "/models/qwen2_untied_fp16_gqa4");
  REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().to_string()));
  LatencyOptions o;
  o.input_len = 6;
  o.output_len = 12;
  o.batch_size = 3;
  o.prefill_repeats = 1;
  // Greedy, and greedy with a strongly negative presence penalty, which pulls every step to a
  // token already in the output: a step whose fed token is left out of the history, or a token
  // fed from another sequence (each has its own prompt), changes what follows.
  for (float penalty : {0.0f, -50.0f}) {
    CAPTURE(penalty);
    o.decode_sampling.presence_penalty = penalty;
    o.async_decode = false;
    int64_t promised_sync = -1, promised_async = -1;
    const auto sync = decode(*model, o, &promised_sync);
    o.async_decode = true;
    const auto async = decode(*model, o, &promised_async);
    // Plain greedy async steps promise their argmax to the runner (the CUDA runner then takes
    // it in the lm_head GEMV); penalised rows and the synchronous loop do not.
    CHECK(promised_sync == 0);
    CHECK(promised_async == (penalty == 0.0f ? o.output_len - 1 : 0));
    REQUIRE(sync.size() == 3);
    for (const auto& seq : sync) CHECK(seq.size() == 11);
    CHECK(async == sync);
    CHECK(sync[0] != sync[1]);
    if (penalty != 0.0f) {
      // The penalty must matter here, or the check above could not see it ignored.
      o.decode_sampling.presence_penalty = 0.0f;
      CHECK(decode(*model, o) != sync);
    }
  }
}
