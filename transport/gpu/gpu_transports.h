// Building the GPU backends, and the probe make_transport asks. Built only with CUDA.
#pragma once

#include <memory>

#include "core/error.h"
#include "transport/gpu/gpu_transport.h"

namespace tandem {

struct GpuTransportOptions {
  size_t slot_bytes = 0;     // staging piece per side; 0 = the backend's default
  bool peer_staged = false;  // peer: use the staged path even where P2P would allow direct
};

// Whether each GPU can access the other's memory (cudaDeviceCanAccessPeer both ways).
bool gpu_peer_access(int a, int b);
int gpu_device_count();

Result<std::unique_ptr<GpuTransport>> make_peer_transport(const KvPoolView& src,
                                                          const KvPoolView& dst,
                                                          const GpuTransportOptions& opts = {});
Result<std::unique_ptr<GpuTransport>> make_host_staged_transport(
    const KvPoolView& src, const KvPoolView& dst, const GpuTransportOptions& opts = {});
Result<std::unique_ptr<GpuTransport>> make_nccl_transport(const KvPoolView& src,
                                                          const KvPoolView& dst,
                                                          const GpuTransportOptions& opts = {});

}  // namespace tandem
