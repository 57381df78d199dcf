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
  TANDEM_ASSIGN_OR_RETURN(
      QuantConfig q, load_time_quantization(opts.quantization, config.quant, "--quantization"));
  if (!q.quantized()) return Status::Ok();
  return make_error(ErrorCode::kUnsupported,
                    std::string("quantization '") + quant_format_name(q.format) + "' (" +
                        q.describe() +
                        ") is not supported by the CUDA runner yet; the CPU runner runs it "
                        "(--device cpu)");
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
