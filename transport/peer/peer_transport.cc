#include "transport/peer/peer_transport.h"

#include <algorithm>

#include "kernels/cuda_check.cuh"
#include "transport/gpu/device_guard.h"

namespace tandem {

PeerTransport::PeerTransport(const KvPoolView& src, const KvPoolView& dst, bool direct,
                             size_t slot_bytes)
    : StagedTransport(src, dst, slot_bytes),
      direct_(direct),
      direct_src_(src, src.device),
      direct_dst_(dst, src.device) {
  direct_aligned_ = aligned16(nullptr, nullptr);
}

Result<cudaStream_t> PeerTransport::enqueue(const ShipOrder& order) {
  if (!direct_) return StagedTransport::enqueue(order);
  DeviceGuard g(src_.device);
  const int32_t n = int32_t(order.pages.size());
  for (int32_t p = 0; p < n; p += kernels::kMaxPagePairsPerLaunch) {
    const int32_t pe = std::min(n, p + kernels::kMaxPagePairsPerLaunch);
    kernels::launch_copy_kv_pages(direct_src_.side(), direct_dst_.side(), pairs_of(order, p, pe),
                                  order.layer_begin, order.layer_end, src_.page_bytes,
                                  direct_aligned_, src_stream_);
  }
  return src_stream_;
}

void PeerTransport::move_slot(int slot, size_t bytes) {
  DeviceGuard g(src_.device);
  TANDEM_CUDA_CHECK(cudaMemcpyPeerAsync(dst_slot_[slot], dst_.device, src_slot_[slot], src_.device,
                                        bytes, src_stream_));
  TANDEM_CUDA_CHECK(cudaEventRecord(moved_[slot], src_stream_));
  TANDEM_CUDA_CHECK(cudaStreamWaitEvent(dst_stream_, moved_[slot], 0));
}

}  // namespace tandem
