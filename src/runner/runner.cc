#include "runner/runner.h"

#include "tandem_build_config.h"

namespace tandem {

namespace {

// "cuda:N" with N a non-negative decimal integer.
bool is_cuda_device(const std::string& device) {
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5) return false;
  for (size_t i = 5; i < device.size(); ++i)
    if (device[i] < '0' || device[i] > '9') return false;
  return true;
}

}  // namespace

Result<std::unique_ptr<ModelRunner>> make_runner(const ModelDir& model, const RunnerOptions& opts) {
  if (opts.device == "cpu") return make_cpu_runner(model, opts);
  if (is_cuda_device(opts.device)) {
#if TANDEM_HAVE_CUDA
    return make_cuda_runner(model, opts);
#else
    return make_error(ErrorCode::kUnsupported,
                      "device '" + opts.device + "': this build of tandem has no CUDA support");
#endif
  }
  return make_error(ErrorCode::kInvalidArgument,
                    "device '" + opts.device + "' is not 'cpu' or 'cuda:N'");
}

}  // namespace tandem
