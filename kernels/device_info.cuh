// What the launchers ask of the device, asked once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

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

// Whether the current device has FP8 tensor cores (sm_89+), asked once per device.
inline bool has_fp8_tensor_cores() {
  static int known[64] = {};  // 0: not asked yet, 1: yes, 2: no
  int device = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= 64) return false;
  if (known[device] == 0) {
    int major = 0, minor = 0;
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    known[device] = major * 10 + minor >= 89 ? 1 : 2;
  }
  return known[device] == 1;
}

}  // namespace tandem::kernels
