// What the GPU's clocks and power did while a benchmark ran. A board at its power limit lowers
// its SM clock (NVML's "SW power cap"): on the H200 test machine a 2,048-token 7B prefill ran at
// 1,605-1,845 MHz and a batch-64 decode step at 1,365-1,965 against 1,980 at batch 1
// (benchmarks/NOTES.md v31), so a figure means little without the clock it ran at. Samples come
// from NVML, loaded at run time: builds and machines without the NVIDIA driver run the same
// benchmarks and report no clocks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

namespace tandem::bench {

struct ClockStats {
  int32_t samples = 0;  // 0: nothing was sampled (no NVML, no device, or a CPU run)
  double sm_mhz_min = 0, sm_mhz_mean = 0, sm_mhz_max = 0;
  double power_w_max = 0;  // the board's power reading (NVML averages it over ~100 ms)
  uint64_t reasons = 0;    // every clock event reason seen, OR-ed (NVML's bit mask)
};

// NVML's clock event reasons as names ("sw_power_cap,hw_slowdown"); "none" for 0, and unknown
// bits as hex.
std::string clock_reason_names(uint64_t reasons);

// `"key": {...}` for a JSON object, or "" where stats.samples == 0.
std::string clock_stats_json(const char* key, const ClockStats& stats);

// Samples one GPU (by its PCI bus id, as cudaDeviceGetPCIBusId gives it) on a thread of its own
// every `period` from construction until stop(). With an empty bus id, or where NVML or the
// device is missing, or with TANDEM_BENCH_CLOCKS=0 in the environment, it samples nothing.
class ClockSampler {
 public:
  explicit ClockSampler(const std::string& pci_bus_id,
                        std::chrono::microseconds period = std::chrono::milliseconds(5));
  ~ClockSampler();
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  ClockStats stop();

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
  ClockStats stats_;    // written by the thread until stop() joins it
  double mhz_sum_ = 0;  // sm_mhz_mean's numerator, divided at stop()
};

}  // namespace tandem::bench
