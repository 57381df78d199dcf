#include "transport/gpu/staged_transport.h"

#include "kernels/cuda_check.cuh"
#include "transport/gpu/device_guard.h"
#include "transport/ship_pieces.h"

namespace tandem {

StagedTransport::StagedTransport(const KvPoolView& src, const KvPoolView& dst, size_t slot_bytes)
    : GpuTransport(src, dst),
      slot_bytes_(slot_bytes),
      src_planes_(src, src.device),
      dst_planes_(dst, dst.device) {
  for (int s = 0; s < kSlots; ++s) {
    {
      DeviceGuard g(src_.device);
      TANDEM_CUDA_CHECK(cudaMalloc(&src_slot_[s], slot_bytes_));
      TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&moved_[s], cudaEventDisableTiming));
    }
    DeviceGuard g(dst_.device);
    TANDEM_CUDA_CHECK(cudaMalloc(&dst_slot_[s], slot_bytes_));
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&scattered_[s], cudaEventDisableTiming));
  }
  aligned_ = aligned16(src_slot_[0], dst_slot_[0]) && aligned16(src_slot_[1], dst_slot_[1]);
}

StagedTransport::~StagedTransport() {
  cudaStreamSynchronize(src_stream_);
  cudaStreamSynchronize(dst_stream_);
  for (int s = 0; s < kSlots; ++s) {
    cudaFree(src_slot_[s]);
    cudaFree(dst_slot_[s]);
    cudaEventDestroy(moved_[s]);
    cudaEventDestroy(scattered_[s]);
  }
}

Result<cudaStream_t> StagedTransport::enqueue(const ShipOrder& order) {
  TANDEM_ASSIGN_OR_RETURN(
      std::vector<ShipPiece> pieces,
      plan_ship_pieces(int32_t(order.pages.size()), order.layer_begin, order.layer_end,
                       src_.page_bytes, slot_bytes_, kernels::kMaxPagePairsPerLaunch));
  for (const ShipPiece& piece : pieces) {
    const int slot = next_slot_;
    next_slot_ = (next_slot_ + 1) % kSlots;
    const kernels::KvPagePairs pairs = pairs_of(order, piece.pair_begin, piece.pair_end);
    {
      DeviceGuard g(src_.device);
      // The previous piece in this slot must have been scattered before we overwrite either
      // end of it (a never-recorded event counts as complete).
      TANDEM_CUDA_CHECK(cudaStreamWaitEvent(src_stream_, scattered_[slot], 0));
      kernels::launch_copy_kv_pages(src_planes_.side(), {nullptr, src_slot_[slot]}, pairs,
                                    piece.layer_begin, piece.layer_end, src_.page_bytes, aligned_,
                                    src_stream_);
    }
    move_slot(slot, piece.bytes);
    DeviceGuard g(dst_.device);
    kernels::launch_copy_kv_pages({nullptr, dst_slot_[slot]}, dst_planes_.side(), pairs,
                                  piece.layer_begin, piece.layer_end, dst_.page_bytes, aligned_,
                                  dst_stream_);
    TANDEM_CUDA_CHECK(cudaEventRecord(scattered_[slot], dst_stream_));
  }
  return dst_stream_;
}

}  // namespace tandem
