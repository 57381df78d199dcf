#include "transport/make_transport.h"

#include <string>

#include "transport/local/local_transport.h"

namespace tandem {

Result<std::unique_ptr<KvTransport>> make_transport(std::string_view name, const KvPoolView& src,
                                                    const KvPoolView& dst) {
  const bool host = src.device < 0 && dst.device < 0;
  if (name != "auto" && name != "local" && name != "peer" && name != "nccl" &&
      name != "host_staged") {
    return make_error(ErrorCode::kInvalidArgument,
                      "--kv-transport " + std::string(name) +
                          ": expected auto, local, peer, nccl or host_staged");
  }
  if (host) {
    if (name == "auto" || name == "local") return std::unique_ptr<KvTransport>(new LocalTransport);
    return make_error(ErrorCode::kUnsupported, "--kv-transport " + std::string(name) +
                                                   " moves GPU memory; both stages are on the CPU "
                                                   "(use local)");
  }
  if (src.device < 0 || dst.device < 0) {
    return make_error(ErrorCode::kUnsupported,
                      "one stage on the CPU and one on a GPU is not supported: put both stages "
                      "on GPUs or both on the CPU");
  }
  return make_error(ErrorCode::kUnsupported,
                    "--kv-transport " + std::string(name) +
                        ": GPU-to-GPU KV transports are not available in this build yet; run "
                        "both stages on one GPU (--prefill-device and --decode-device equal)");
}

}  // namespace tandem
