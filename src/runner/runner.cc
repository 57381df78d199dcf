#include "runner/runner.h"

#include <algorithm>

#include "core/check.h"
#include "model/model_dir.h"
#include "tandem_build_config.h"

namespace tandem {

bool plain_greedy(const SampleRequest& r) {
  const ResolvedSampling& p = *r.params;
  return p.greedy() && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f && r.suppress.empty();
}

bool greedy_in_row_order(std::span<const SampleRequest> requests, size_t rows) {
  if (requests.size() != rows) return false;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].logit_index != int32_t(i) || !plain_greedy(requests[i])) return false;
  }
  return true;
}

void ModelRunner::note_greedy_next(const ForwardBatch& batch) {
  TANDEM_CHECK(greedy_next_rows_ < 0,
               "a forward after one with greedy_next: sample_async() must follow that one");
  greedy_next_rows_ = batch.greedy_next ? int64_t(batch.logit_rows.size()) : -1;
}

void ModelRunner::check_greedy_next(std::span<const SampleRequest> requests, bool async) {
  if (greedy_next_rows_ < 0) return;
  TANDEM_CHECK(async, "sample() after a forward with greedy_next: sample_async() must follow it");
  TANDEM_CHECK(greedy_in_row_order(requests, size_t(greedy_next_rows_)),
               "sample_async() of %zu requests after a forward with greedy_next over %lld rows: "
               "each must be plain greedy, request i on row i",
               requests.size(), static_cast<long long>(greedy_next_rows_));
  greedy_next_rows_ = -1;
  ++greedy_next_kept_;
}

void ModelRunner::sample_async(std::span<const SampleRequest> requests) {
  TANDEM_CHECK(async_ids_.size() < kMaxAsyncSamples, "%zu samples outstanding", async_ids_.size());
  check_greedy_next(requests, true);
  // A fed request's pending token joins a copy of its output, for the penalties.
  std::vector<SampleRequest> resolved(requests.begin(), requests.end());
  std::vector<std::vector<int32_t>> outputs(requests.size());
  for (size_t i = 0; i < resolved.size(); ++i) {
    SampleRequest& r = resolved[i];
    if (r.fed < 0) continue;
    TANDEM_CHECK(size_t(r.fed) < last_async_ids_.size(), "request %zu fed from request %d of %zu",
                 i, r.fed, last_async_ids_.size());
    outputs[i].assign(r.history.output.begin(), r.history.output.end());
    outputs[i].push_back(last_async_ids_[size_t(r.fed)]);
    r.history.output = outputs[i];
    r.fed = -1;
  }
  std::vector<int32_t> ids(requests.size());
  sample(resolved, ids);
  last_async_ids_ = ids;
  async_ids_.push_back(std::move(ids));
}

void ModelRunner::sample_wait(std::span<int32_t> out_tokens) {
  TANDEM_CHECK(!async_ids_.empty(), "sample_wait() without sample_async()");
  const std::vector<int32_t>& ids = async_ids_.front();
  TANDEM_CHECK(out_tokens.size() >= ids.size());
  std::copy(ids.begin(), ids.end(), out_tokens.begin());
  async_ids_.pop_front();
}

std::vector<int32_t> ModelRunner::fed_tokens(const ForwardBatch& batch) const {
  std::vector<int32_t> tokens(batch.tokens.begin(), batch.tokens.end());
  if (batch.fed.empty()) return tokens;
  TANDEM_CHECK(batch.fed.size() == tokens.size(), "%zu fed entries for %zu tokens",
               batch.fed.size(), tokens.size());
  for (size_t t = 0; t < tokens.size(); ++t) {
    const int32_t j = batch.fed[t];
    if (j < 0) continue;
    TANDEM_CHECK(size_t(j) < last_async_ids_.size(), "token %zu fed from request %d of %zu", t, j,
                 last_async_ids_.size());
    tokens[t] = last_async_ids_[size_t(j)];
  }
  return tokens;
}

bool is_device_name(const std::string& device, const std::string& kind) {
  if (device == kind) return true;
  const std::string prefix = kind + ":";
  if (device.rfind(prefix, 0) != 0 || device.size() == prefix.size()) return false;
  for (size_t i = prefix.size(); i < device.size(); ++i)
    if (device[i] < '0' || device[i] > '9') return false;
  return true;
}

Status cuda_runner_supports(const ModelConfig& config, const RunnerOptions& opts) {
  // Every quantization the loader admits has CUDA kernels; what a GPU cannot run (FP8 below
  // sm_89, layouts the kernels do not hold) is refused when the runner is built.
  TANDEM_TRY(load_time_quantization(opts.quantization, config.quant, "--quantization"));
  if (config.arch == Arch::kLlama && config.attention_bias) {
    return make_error(ErrorCode::kUnsupported,
                      "config.json: attention_bias = true gives Llama's o_proj a bias, which the "
                      "CUDA runner does not apply; the CPU runner runs it (--device cpu)");
  }
  if (config.mlp_bias) {
    return make_error(ErrorCode::kUnsupported,
                      "config.json: mlp_bias = true is not supported by the CUDA runner; the CPU "
                      "runner runs it (--device cpu)");
  }
  return Status::Ok();
}

Result<std::unique_ptr<ModelRunner>> make_runner(const ModelDir& model, const RunnerOptions& opts) {
  // "cpu:N" names one of several CPU stages (the two-stage pipeline on a machine without GPUs).
  if (is_device_name(opts.device, "cpu")) return make_cpu_runner(model, opts);
  if (is_device_name(opts.device, "cuda") && opts.device != "cuda") {
#if TANDEM_HAVE_CUDA
    TANDEM_TRY(cuda_runner_supports(model.config, opts));
    return make_cuda_runner(model, opts);
#else
    return make_error(ErrorCode::kUnsupported,
                      "device '" + opts.device + "': this build of tandem has no CUDA support");
#endif
  }
  return make_error(ErrorCode::kInvalidArgument,
                    "device '" + opts.device + "' is not 'cpu', 'cpu:N' or 'cuda:N'");
}

}  // namespace tandem
