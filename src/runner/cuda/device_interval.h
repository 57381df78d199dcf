// CUDA events behind trace spans (trace/trace.h DeviceInterval): a forward's start and end on
// the device, turned into trace_now_ns() time through a clock anchor, an event whose
// completion the host observed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "trace/trace.h"

namespace tandem {

struct ClockAnchor {
  ClockAnchor() = default;
  ClockAnchor(const ClockAnchor&) = delete;
  ClockAnchor& operator=(const ClockAnchor&) = delete;
  ~ClockAnchor();
  cudaEvent_t event = nullptr;
  int64_t host_ns = 0;  // trace_now_ns() right after the event completed
};

// Records an event on `stream`, waits for it and reads the host clock: on an idle stream the
// error is the wait's wake-up latency (microseconds). Event times are float milliseconds from
// the anchor, so a runner re-anchors every few seconds to keep them to a microsecond.
std::shared_ptr<const ClockAnchor> make_clock_anchor(cudaStream_t stream);

// Timing events reused across forwards: creating and destroying two events per forward cost
// more than recording them (measured with the 0.5B on the H200, benchmarks/NOTES.md v8).
// Intervals return their events from whichever thread drops the last trace reference.
class EventPool {
 public:
  EventPool() = default;
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  ~EventPool();
  cudaEvent_t take();  // on the thread whose device owns the events
  void give(cudaEvent_t e);

 private:
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
};

class CudaInterval final : public DeviceInterval {
 public:
  CudaInterval(std::shared_ptr<const ClockAnchor> anchor, std::shared_ptr<EventPool> pool);
  CudaInterval(const CudaInterval&) = delete;
  CudaInterval& operator=(const CudaInterval&) = delete;
  ~CudaInterval() override;

  void record_start(cudaStream_t stream);
  void record_end(cudaStream_t stream);
  bool resolve(int64_t& start_ns, int64_t& end_ns) const override;

 private:
  std::shared_ptr<const ClockAnchor> anchor_;
  std::shared_ptr<EventPool> pool_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t end_ = nullptr;
};

}  // namespace tandem
