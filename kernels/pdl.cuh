// Programmatic dependent launch (sm_90): a kernel launched with `pdl` may start while the kernel
// before it in the stream still runs. It reads what needs no predecessor (its weights) first,
// then waits at grid_dependency_wait() until the predecessor has finished and its writes are
// visible. Everything that reads or writes activations, caches or outputs comes after the wait,
// so nothing can race: the predecessor itself only passed its own wait once the kernel before
// it had finished. Each such kernel also lets its own successor launch early
// (allow_dependents()): small kernels at their start, the decode attention after its wait,
// GEMVs whose grid is resident all at once at their start and the others after their loop (a
// GEMV grid of many waves that triggers at its start lets the kernel after next launch and sit
// on the slots its later waves need; benchmarks/NOTES.md v21, v37). On a plain launch, or
// before sm_90, both instructions do nothing.
#pragma once

#include <cuda_runtime.h>

#include "cuda_check.cuh"

namespace tandem::kernels::pdl {

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// An input that a predecessor wrote, read after grid_dependency_wait(): a coherent load, never
// __ldg. ld.global.nc promises that the data stays unchanged while the kernel runs, which an
// overlapped kernel's input does not (it is written after the kernel started): the FP8 GEMV with
// its first activations loaded right after the wait by __ldg read stale ones (overlapped logits
// 0.41 relative off the CPU's). ld.global.ca keeps the L1 reuse of __ldg (a block's warps read
// the same activations); ld.global.cg, through L2 only, took the FP8 7B step 2.62 -> 2.87 ms
// (H200, benchmarks/NOTES.md v22). Weights, scales and norm weights keep __ldg.
template <typename T>
__device__ __forceinline__ T load_input(const T* p) {
  return __ldca(p);
}

// kernel<<<grid, block, smem, stream>>>(args...), allowed to overlap its predecessor when `pdl`
// (the caller checked that the device is sm_90 or newer and that the kernel waits as above).
template <typename... Params, typename... Args>
void launch(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
            cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute overlap = {};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &overlap;
  config.numAttrs = pdl ? 1 : 0;
  TANDEM_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

}  // namespace tandem::kernels::pdl
