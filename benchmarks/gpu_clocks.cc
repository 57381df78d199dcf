#include "gpu_clocks.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace tandem::bench {
namespace {

// The few NVML entry points used, declared as nvml.h declares them (the header is not part of
// every CUDA toolkit install, and nothing here may need the driver to build).
using NvmlDevice = struct NvmlDeviceOpaque*;
using NvmlReturn = int;  // NVML_SUCCESS = 0
constexpr int kNvmlClockSm = 1;

struct Nvml {
  NvmlReturn (*device_by_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*clock_info)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*power_usage)(NvmlDevice, unsigned*) = nullptr;  // milliwatts
  NvmlReturn (*event_reasons)(NvmlDevice, unsigned long long*) = nullptr;
  bool ok = false;
};

template <typename F>
bool find(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

// Loaded and initialised once per process, and never unloaded (the samplers' threads may use it
// until the process ends).
const Nvml& nvml() {
  static const Nvml loaded = [] {
    Nvml n;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return n;
    NvmlReturn (*init)() = nullptr;
    if (!find(lib, "nvmlInit_v2", init) ||
        !find(lib, "nvmlDeviceGetHandleByPciBusId_v2", n.device_by_bus_id) ||
        !find(lib, "nvmlDeviceGetClockInfo", n.clock_info) ||
        !find(lib, "nvmlDeviceGetPowerUsage", n.power_usage)) {
      return n;
    }
    // Renamed in newer drivers; the older name stays as an alias.
    if (!find(lib, "nvmlDeviceGetCurrentClocksEventReasons", n.event_reasons) &&
        !find(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", n.event_reasons)) {
      return n;
    }
    n.ok = init() == 0;
    return n;
  }();
  return loaded;
}

}  // namespace

std::string clock_reason_names(uint64_t reasons) {
  static constexpr struct {
    uint64_t bit;
    const char* name;
  } kNames[] = {{0x1, "gpu_idle"},    {0x2, "applications_clocks"}, {0x4, "sw_power_cap"},
                {0x8, "hw_slowdown"}, {0x10, "sync_boost"},         {0x20, "sw_thermal"},
                {0x40, "hw_thermal"}, {0x80, "hw_power_brake"},     {0x100, "display_clocks"}};
  if (reasons == 0) return "none";
  std::string out;
  for (const auto& n : kNames) {
    if ((reasons & n.bit) == 0) continue;
    if (!out.empty()) out += ',';
    out += n.name;
    reasons &= ~n.bit;
  }
  if (reasons != 0) {
    char hex[32];
    std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(reasons));
    if (!out.empty()) out += ',';
    out += hex;
  }
  return out;
}

std::string clock_stats_json(const char* key, const ClockStats& s) {
  if (s.samples == 0) return "";
  char buf[384];
  std::snprintf(buf, sizeof(buf),
                "\"%s\": {\"samples\": %d, \"sm_mhz_min\": %.0f, \"sm_mhz_mean\": %.0f, "
                "\"sm_mhz_max\": %.0f, \"power_w_max\": %.1f, \"reasons\": \"%s\"}",
                key, s.samples, s.sm_mhz_min, s.sm_mhz_mean, s.sm_mhz_max, s.power_w_max,
                clock_reason_names(s.reasons).c_str());
  return buf;
}

ClockSampler::ClockSampler(const std::string& pci_bus_id, std::chrono::microseconds period) {
  // TANDEM_BENCH_CLOCKS=0: no sampling thread at all (to check that it costs nothing).
  const char* env = std::getenv("TANDEM_BENCH_CLOCKS");
  if (pci_bus_id.empty() || (env != nullptr && std::string(env) == "0")) return;
  const Nvml& n = nvml();
  NvmlDevice dev = nullptr;
  if (!n.ok || n.device_by_bus_id(pci_bus_id.c_str(), &dev) != 0) return;
  thread_ = std::thread([this, &n, dev, period] {
    while (!stop_.load(std::memory_order_relaxed)) {
      unsigned mhz = 0, mw = 0;
      unsigned long long why = 0;
      if (n.clock_info(dev, kNvmlClockSm, &mhz) == 0) {
        ClockStats& s = stats_;
        s.sm_mhz_min = s.samples == 0 ? mhz : std::min(s.sm_mhz_min, double(mhz));
        s.sm_mhz_max = std::max(s.sm_mhz_max, double(mhz));
        mhz_sum_ += mhz;
        ++s.samples;
        if (n.power_usage(dev, &mw) == 0) s.power_w_max = std::max(s.power_w_max, mw * 1e-3);
        if (n.event_reasons(dev, &why) == 0) s.reasons |= why;
      }
      std::this_thread::sleep_for(period);
    }
  });
}

ClockSampler::~ClockSampler() {
  stop();
}

ClockStats ClockSampler::stop() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
  if (stats_.samples > 0) stats_.sm_mhz_mean = mhz_sum_ / stats_.samples;
  return stats_;
}

}  // namespace tandem::bench
