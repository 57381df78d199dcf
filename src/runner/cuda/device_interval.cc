#include "runner/cuda/device_interval.h"

#include "kernels/cuda_check.cuh"

namespace tandem {

ClockAnchor::~ClockAnchor() {
  if (event != nullptr) cudaEventDestroy(event);
}

std::shared_ptr<const ClockAnchor> make_clock_anchor(cudaStream_t stream) {
  auto a = std::make_shared<ClockAnchor>();
  TANDEM_CUDA_CHECK(cudaEventCreate(&a->event));
  TANDEM_CUDA_CHECK(cudaEventRecord(a->event, stream));
  TANDEM_CUDA_CHECK(cudaEventSynchronize(a->event));
  a->host_ns = trace_now_ns();
  return a;
}

CudaInterval::CudaInterval(std::shared_ptr<const ClockAnchor> anchor) : anchor_(std::move(anchor)) {
  TANDEM_CUDA_CHECK(cudaEventCreate(&start_));
  TANDEM_CUDA_CHECK(cudaEventCreate(&end_));
}

CudaInterval::~CudaInterval() {
  cudaEventDestroy(start_);
  cudaEventDestroy(end_);
}

void CudaInterval::record_start(cudaStream_t stream) {
  TANDEM_CUDA_CHECK(cudaEventRecord(start_, stream));
}

void CudaInterval::record_end(cudaStream_t stream) {
  TANDEM_CUDA_CHECK(cudaEventRecord(end_, stream));
}

bool CudaInterval::resolve(int64_t& start_ns, int64_t& end_ns) const {
  const cudaError_t done = cudaEventQuery(end_);
  if (done == cudaErrorNotReady) return false;
  TANDEM_CUDA_CHECK(done);
  float a = 0.0f, b = 0.0f;
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&a, anchor_->event, start_));
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&b, anchor_->event, end_));
  start_ns = anchor_->host_ns + int64_t(double(a) * 1e6);
  end_ns = anchor_->host_ns + int64_t(double(b) * 1e6);
  return true;
}

}  // namespace tandem
