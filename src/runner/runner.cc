#include "runner/runner.h"

#include "model/model_dir.h"
#include "tandem_build_config.h"

namespace tandem {

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
