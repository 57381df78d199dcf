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

EventPool::~EventPool() {
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t EventPool::take() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  TANDEM_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

void EventPool::give(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(e);
}

CudaInterval::CudaInterval(std::shared_ptr<const ClockAnchor> anchor,
                           std::shared_ptr<EventPool> pool)
    : anchor_(std::move(anchor)), pool_(std::move(pool)) {
  start_ = pool_->take();
  end_ = pool_->take();
}

CudaInterval::~CudaInterval() {
  pool_->give(start_);
  pool_->give(end_);
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
