// CUDA API failures are fatal (DESIGN.md: a sticky error poisons the context); this prints the
// call and the error, then aborts. Kernels use it after every launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace tandem::kernels {

[[noreturn]] inline void cuda_failed(cudaError_t err, const char* what, const char* file,
                                     int line) {
  std::fprintf(stderr, "%s:%d: CUDA error %s (%s) in %s\n", file, line, cudaGetErrorName(err),
               cudaGetErrorString(err), what);
  std::abort();
}

}  // namespace tandem::kernels

#define TANDEM_CUDA_CHECK(call)                                                    \
  do {                                                                             \
    cudaError_t tandem_cuda_err_ = (call);                                         \
    if (tandem_cuda_err_ != cudaSuccess) [[unlikely]]                              \
      ::tandem::kernels::cuda_failed(tandem_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a launch: configuration errors show up here, not at the launch itself.
#define TANDEM_CUDA_CHECK_LAUNCH() TANDEM_CUDA_CHECK(cudaGetLastError())
