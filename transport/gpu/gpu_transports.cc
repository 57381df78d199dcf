#include "transport/gpu/gpu_transports.h"

#include <algorithm>
#include <string>

#include "kernels/cuda_check.cuh"
#include "transport/gpu/device_guard.h"
#include "transport/host_staged/host_staged_transport.h"
#include "transport/nccl/nccl_transport.h"
#include "transport/peer/peer_transport.h"

namespace tandem {
namespace {

// Default staging pieces: pinned PCIe copies reach ~55 GB/s from a few MiB; NCCL needs large
// messages (75 GB/s at 1 MiB, 360 at 256 MiB on the H200 pair), peer copies less so.
constexpr size_t kHostStagedSlot = size_t(8) << 20;
constexpr size_t kPeerStagedSlot = size_t(16) << 20;
constexpr size_t kNcclSlot = size_t(64) << 20;

Status check_gpu_pools(const KvPoolView& src, const KvPoolView& dst, const char* name) {
  const int n = gpu_device_count();
  for (int d : {src.device, dst.device}) {
    if (d < 0 || d >= n) {
      return make_error(ErrorCode::kUnsupported,
                        std::string("--kv-transport ") + name + ": cuda:" + std::to_string(d) +
                            " is not a GPU of this machine (" + std::to_string(n) + " found)");
    }
  }
  return Status::Ok();
}

size_t slot_or(const GpuTransportOptions& o, size_t fallback, const KvPoolView& src) {
  return std::max(o.slot_bytes ? o.slot_bytes : fallback, 2 * src.page_bytes);
}

void enable_peer(int from, int to) {
  DeviceGuard g(from);
  const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();  // not an error for us; clear it so later checks don't see it
    return;
  }
  TANDEM_CUDA_CHECK(e);
}

}  // namespace

int gpu_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

bool gpu_peer_access(int a, int b) {
  if (a == b) return true;
  int ab = 0, ba = 0;
  TANDEM_CUDA_CHECK(cudaDeviceCanAccessPeer(&ab, a, b));
  TANDEM_CUDA_CHECK(cudaDeviceCanAccessPeer(&ba, b, a));
  return ab && ba;
}

Result<std::unique_ptr<GpuTransport>> make_peer_transport(const KvPoolView& src,
                                                          const KvPoolView& dst,
                                                          const GpuTransportOptions& opts) {
  TANDEM_TRY(check_gpu_pools(src, dst, "peer"));
  const bool p2p = gpu_peer_access(src.device, dst.device);
  if (p2p && src.device != dst.device) {
    enable_peer(src.device, dst.device);
    enable_peer(dst.device, src.device);
  }
  const bool direct = p2p && !opts.peer_staged;
  return std::unique_ptr<GpuTransport>(new PeerTransport(
      src, dst, direct, direct ? 2 * src.page_bytes : slot_or(opts, kPeerStagedSlot, src)));
}

Result<std::unique_ptr<GpuTransport>> make_host_staged_transport(const KvPoolView& src,
                                                                 const KvPoolView& dst,
                                                                 const GpuTransportOptions& opts) {
  TANDEM_TRY(check_gpu_pools(src, dst, "host_staged"));
  return std::unique_ptr<GpuTransport>(
      new HostStagedTransport(src, dst, slot_or(opts, kHostStagedSlot, src)));
}

Result<std::unique_ptr<GpuTransport>> make_nccl_transport(const KvPoolView& src,
                                                          const KvPoolView& dst,
                                                          const GpuTransportOptions& opts) {
  TANDEM_TRY(check_gpu_pools(src, dst, "nccl"));
  if (src.device == dst.device) {
    return make_error(ErrorCode::kUnsupported,
                      "--kv-transport nccl: NCCL cannot send from a GPU to itself (both stages "
                      "on cuda:" +
                          std::to_string(src.device) + "); use peer or host_staged on one GPU");
  }
  return std::unique_ptr<GpuTransport>(new NcclTransport(src, dst, slot_or(opts, kNcclSlot, src)));
}

}  // namespace tandem
