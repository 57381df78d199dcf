#include "transport/make_transport.h"

#include <string>

#include "tandem_build_config.h"
#include "transport/choose_transport.h"
#include "transport/local/local_transport.h"
#if TANDEM_HAVE_CUDA
#include "transport/gpu/gpu_transports.h"
#endif

namespace tandem {

Result<std::unique_ptr<KvTransport>> make_transport(std::string_view name, const KvPoolView& src,
                                                    const KvPoolView& dst) {
  TransportProbe probe;
  probe.src_device = src.device;
  probe.dst_device = dst.device;
#if TANDEM_HAVE_CUDA
  probe.have_cuda = true;
  const int n = gpu_device_count();
  if (src.device >= 0 && dst.device >= 0 && src.device < n && dst.device < n) {
    probe.peer_access = gpu_peer_access(src.device, dst.device);
  }
#endif
  TANDEM_ASSIGN_OR_RETURN(std::string choice, choose_transport(name, probe));
  if (choice == "local" && src.device < 0) {
    return std::unique_ptr<KvTransport>(new LocalTransport);
  }
#if TANDEM_HAVE_CUDA
  auto up = [](Result<std::unique_ptr<GpuTransport>> r) -> Result<std::unique_ptr<KvTransport>> {
    if (!r.ok()) return r.error();
    return std::unique_ptr<KvTransport>(std::move(r).value());
  };
  // "local" on one GPU means the engine runs the stages colocated and never ships; a caller
  // that ships anyway gets the on-device copy kernel.
  if (choice == "peer" || choice == "local") return up(make_peer_transport(src, dst));
  if (choice == "host_staged") return up(make_host_staged_transport(src, dst));
  if (choice == "nccl") return up(make_nccl_transport(src, dst));
#endif
  return make_error(ErrorCode::kUnsupported, "--kv-transport " + std::string(name) +
                                                 ": no backend for " + choice + " in this build");
}

}  // namespace tandem
