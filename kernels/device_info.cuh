// What the launchers ask of the device, asked once.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "cuda_check.cuh"

namespace tandem::kernels {

// SMs of the first caller's device: the GPUs of one process are alike (tandem pairs two of a
// kind), so one device speaks for all of them.
inline int32_t multiprocessors() {
  static const int32_t count = [] {
    int device = 0, sms = 0;
    TANDEM_CUDA_CHECK(cudaGetDevice(&device));
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return int32_t(sms);
  }();
  return count;
}

// Whether the current device has FP8 tensor cores (sm_89+), asked once per device. The two
// stages' runners launch from their own threads, so the answers are atomics (two threads that
// both ask first store the same answer).
inline bool has_fp8_tensor_cores() {
  static std::atomic<int> known[64] = {};  // 0: not asked yet, 1: yes, 2: no
  int device = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= 64) return false;
  int answer = known[device].load(std::memory_order_relaxed);
  if (answer == 0) {
    int major = 0, minor = 0;
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    answer = major * 10 + minor >= 89 ? 1 : 2;
    known[device].store(answer, std::memory_order_relaxed);
  }
  return answer == 1;
}

// Blocks of `kernel` (`threads` and `smem` bytes of dynamic shared memory a block) that an SM
// of the current device holds at once, at least 1; asked once per device, kernel and shape
// (launchers call it for every launch, and eager steps launch hundreds of kernels). Any
// cudaFuncSetAttribute the launch needs must come first: the answer counts on it.
inline int32_t resident_blocks_per_sm(const void* kernel, int threads, size_t smem) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, int, size_t>, int32_t> known;
  int device = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  auto [it, fresh] = known.try_emplace({device, kernel, threads, smem}, 1);
  if (fresh) {
    int n = 0;
    TANDEM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
    it->second = std::max(n, 1);
  }
  return it->second;
}

// Whether `blocks` blocks of `kernel` (threads and dynamic shared memory a block as launched)
// are all resident at once on the current device: one wave.
template <typename... Params>
bool fits_one_wave(void (*kernel)(Params...), int64_t blocks, int threads, size_t smem) {
  const int64_t per_sm =
      resident_blocks_per_sm(reinterpret_cast<const void*>(kernel), threads, smem);
  return blocks <= per_sm * multiprocessors();
}

// An overlapped launch's form: `lead`, which lets its successor launch at its start, where its
// grid of `blocks` is resident all at once, else `plain`, which does so after its loop
// (gemv_warp.cuh lead_trigger). Asked of `lead` itself, the kernel that would launch: the two
// forms may differ in registers, so in blocks an SM.
template <typename... Params>
auto lead_if_one_wave(void (*plain)(Params...), void (*lead)(Params...), int64_t blocks,
                      int threads, size_t smem) -> void (*)(Params...) {
  return fits_one_wave(lead, blocks, threads, smem) ? lead : plain;
}

}  // namespace tandem::kernels
