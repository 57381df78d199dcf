#include "runner/cuda/device_buffer.h"

#include "kernels/cuda_check.cuh"

namespace tandem {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) TANDEM_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

PinnedBuffer::PinnedBuffer(size_t bytes, bool mapped) : bytes_(bytes) {
  if (bytes == 0) return;
  TANDEM_CUDA_CHECK(cudaHostAlloc(&ptr_, bytes, mapped ? cudaHostAllocMapped : 0));
  if (mapped) TANDEM_CUDA_CHECK(cudaHostGetDevicePointer(&device_ptr_, ptr_, 0));
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
}

}  // namespace tandem
