// Programmatic dependent launch (compute capability 9.0+). A decode step is a chain of short
// kernels, each paying a launch and ramp-up while the kernel before it drains. Launched with the
// PDL attribute, a kernel's blocks are scheduled as soon as every block of the previous kernel
// has called pdl_launch_dependents, and wait in pdl_wait for the previous grid to finish and its
// writes to be visible. (Prefetching the GEMVs' weight rows into L2 before the wait was
// measured on the H200 and made decode slower: the early blocks' prefetches evicted each other.)
//
// Safety: pdl_launch_dependents only lets the next grid be scheduled; the next grid's pdl_wait
// still waits for this whole grid and its memory. A kernel launched without the attribute is
// ordered as usual, and pdl_wait returns at once in it. Below sm_90 both are no-ops and
// launch_pdl launches plainly.
//
// Off unless TANDEM_PDL=1: measured on the H200 (benchmarks/NOTES.md, v8), Qwen2.5-7B decode at
// batch 1 took 4.72 ms with it and 4.55 ms without; the 0.5B draft 1.116 vs 1.127 ms.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "cuda_check.cuh"

namespace tandem::kernels {

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether the current device takes the attribute and TANDEM_PDL is "1"; cached per device.
inline bool pdl_enabled() {
  static int cache[64] = {};  // 0 unknown, 1 off, 2 on
  int device = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= 64) return false;
  if (cache[device] == 0) {
    int major = 0;
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    const char* env = std::getenv("TANDEM_PDL");
    const bool on = env != nullptr && std::strcmp(env, "1") == 0;
    cache[device] = major >= 9 && on ? 2 : 1;
  }
  return cache[device] == 2;
}

template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  TANDEM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace tandem::kernels
