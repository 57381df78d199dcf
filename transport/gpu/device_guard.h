// Makes a device current for a scope and restores the caller's: the transports run on the
// prefill stage's thread, whose runner expects its own device to stay current.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda_check.cuh"

namespace tandem {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    TANDEM_CUDA_CHECK(cudaGetDevice(&previous_));
    if (device != previous_) TANDEM_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace tandem
