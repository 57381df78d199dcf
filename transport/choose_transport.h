// The capability probe's decision, as a pure function of what was probed, so every branch is
// tested on the CPU. make_transport fills the probe from the CUDA runtime.
#pragma once

#include <string>
#include <string_view>

#include "core/error.h"

namespace tandem {

struct TransportProbe {
  int src_device = -1;  // -1: host (CPU stage); N: cuda:N
  int dst_device = -1;
  bool peer_access = false;  // both directions of cudaDeviceCanAccessPeer between two GPUs
  bool have_cuda = false;    // this build has the GPU transports
};

// `requested` is --kv-transport. Returns "local", "peer", "nccl" or "host_staged"; "local" on
// one GPU means the stages run colocated and nothing is shipped. auto: host pools or one GPU ->
// local; two GPUs with P2P -> peer (measured faster than NCCL on the H200 pair); without P2P ->
// host_staged. Impossible choices are errors naming --kv-transport.
Result<std::string> choose_transport(std::string_view requested, const TransportProbe& probe);

}  // namespace tandem
