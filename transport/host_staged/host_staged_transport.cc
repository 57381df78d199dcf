#include "transport/host_staged/host_staged_transport.h"

#include "kernels/cuda_check.cuh"
#include "transport/gpu/device_guard.h"

namespace tandem {

HostStagedTransport::HostStagedTransport(const KvPoolView& src, const KvPoolView& dst,
                                         size_t slot_bytes)
    : StagedTransport(src, dst, slot_bytes) {
  for (auto& p : pinned_) {
    TANDEM_CUDA_CHECK(cudaHostAlloc(&p, slot_bytes_, cudaHostAllocPortable));
  }
}

HostStagedTransport::~HostStagedTransport() {
  cudaStreamSynchronize(src_stream_);
  cudaStreamSynchronize(dst_stream_);
  for (auto* p : pinned_) cudaFreeHost(p);
}

void HostStagedTransport::move_slot(int slot, size_t bytes) {
  {
    DeviceGuard g(src_.device);
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(pinned_[slot], src_slot_[slot], bytes, cudaMemcpyDeviceToHost,
                                      src_stream_));
    TANDEM_CUDA_CHECK(cudaEventRecord(moved_[slot], src_stream_));
  }
  DeviceGuard g(dst_.device);
  TANDEM_CUDA_CHECK(cudaStreamWaitEvent(dst_stream_, moved_[slot], 0));
  TANDEM_CUDA_CHECK(
      cudaMemcpyAsync(dst_slot_[slot], pinned_[slot], bytes, cudaMemcpyHostToDevice, dst_stream_));
}

}  // namespace tandem
