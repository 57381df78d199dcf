#include "transport/choose_transport.h"

namespace tandem {

Result<std::string> choose_transport(std::string_view requested, const TransportProbe& probe) {
  const std::string name(requested);
  const std::string flag = "--kv-transport " + name;
  if (name != "auto" && name != "local" && name != "peer" && name != "nccl" &&
      name != "host_staged") {
    return make_error(ErrorCode::kInvalidArgument,
                      flag + ": expected auto, local, peer, nccl or host_staged");
  }
  const bool src_host = probe.src_device < 0, dst_host = probe.dst_device < 0;
  if (src_host && dst_host) {
    if (name == "auto" || name == "local") return std::string("local");
    return make_error(ErrorCode::kUnsupported,
                      flag + " moves GPU memory; both stages are on the CPU (use local)");
  }
  if (src_host || dst_host) {
    return make_error(ErrorCode::kUnsupported,
                      "one stage on the CPU and one on a GPU is not supported: put both stages "
                      "on GPUs or both on the CPU");
  }
  if (!probe.have_cuda) {
    return make_error(ErrorCode::kUnsupported,
                      flag + ": this build has no CUDA; the GPU transports need -Dcuda=enabled");
  }
  const bool same = probe.src_device == probe.dst_device;
  if (name == "auto") {
    if (same) return std::string("local");
    return std::string(probe.peer_access ? "peer" : "host_staged");
  }
  if (name == "local") {
    if (same) return std::string("local");
    return make_error(
        ErrorCode::kUnsupported,
        flag + " copies host memory; the stages are on cuda:" + std::to_string(probe.src_device) +
            " and cuda:" + std::to_string(probe.dst_device) +
            " (use auto, peer, nccl or host_staged)");
  }
  if (name == "nccl" && same) {
    return make_error(ErrorCode::kUnsupported,
                      flag + ": NCCL cannot send from a GPU to itself (both stages on cuda:" +
                          std::to_string(probe.src_device) +
                          "); use peer or host_staged to ship on one GPU");
  }
  return name;  // peer works without P2P too (the driver stages it); host_staged always works
}

}  // namespace tandem
