// What one grid-wide synchronisation costs on this GPU, the ways a decode step can have one:
//   pdl:     a kernel boundary in a CUDA graph of overlapped launches (pdl.cuh): each kernel lets
//            its successor launch at its start and waits for its predecessor; the runner's way;
//   plain:   the same graph without the overlap attribute (a full drain and launch a kernel);
//   barrier: a grid barrier inside one resident grid (a spin on a generation word), one arrival
//            counter, or 16 counters on their own lines and one over them.
// The kernels do nothing else (block 0 bumps a word, so each depends on the one before), so
// the times are the synchronisation alone. A persistent small MLP (o, SwiGLU, down in one grid,
// two barriers) measured 3.6 us a layer slower than three overlapped launches (NOTES.md v31);
// this says how much of that the barriers are.
//
//   sync_cost_bench [--syncs 200] [--reps 20]
//
// One JSON line per case and grid size: microseconds a synchronisation (median of the reps).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda_check.cuh"
#include "kernels/pdl.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kGroups = 16;  // the two-level barrier's arrival counters
constexpr int kStride = 32;  // words between counters: one 128-byte line each
constexpr int kWords = kStride * (kGroups + 2);

__global__ void __launch_bounds__(kThreads) step_kernel(uint32_t* word) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (blockIdx.x == 0 && threadIdx.x == 0) *word += 1;
}

__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// kTwoLevel false: every block on bar[0]; true: on one of kGroups counters, the groups' last
// arrivals on one more. The last arrival resets the counters and advances the generation.
template <bool kTwoLevel>
__device__ __forceinline__ void grid_barrier(uint32_t* bar) {
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t* gen_word = bar + kStride * (kGroups + 1);
    const uint32_t gen = load_acquire(gen_word);
    __threadfence();
    bool last = false;
    if constexpr (kTwoLevel) {
      const uint32_t groups = min(uint32_t(kGroups), gridDim.x), g = blockIdx.x % groups;
      const uint32_t members = gridDim.x / groups + (g < gridDim.x % groups ? 1u : 0u);
      uint32_t* sub = bar + kStride * g;
      uint32_t* top = bar + kStride * kGroups;
      if (atomicAdd(sub, 1u) == members - 1) {
        atomicExch(sub, 0u);
        __threadfence();
        if (atomicAdd(top, 1u) == groups - 1) {
          atomicExch(top, 0u);
          last = true;
        }
      }
    } else if (atomicAdd(bar, 1u) == gridDim.x - 1) {
      atomicExch(bar, 0u);
      last = true;
    }
    if (last) {
      __threadfence();
      atomicAdd(gen_word, 1u);
    } else {
      while (load_acquire(gen_word) == gen) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

template <bool kTwoLevel>
__global__ void __launch_bounds__(kThreads)
    barrier_kernel(uint32_t* bar, uint32_t* word, int syncs) {
  for (int i = 0; i < syncs; ++i) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *word += 1;
    grid_barrier<kTwoLevel>(bar);
  }
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds of `reps` runs of `run` on `stream`, after one warm-up.
template <typename Run>
float time_ms(cudaStream_t stream, int reps, Run&& run) {
  cudaEvent_t a, b;
  TANDEM_CUDA_CHECK(cudaEventCreate(&a));
  TANDEM_CUDA_CHECK(cudaEventCreate(&b));
  run();
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    TANDEM_CUDA_CHECK(cudaEventRecord(a, stream));
    run();
    TANDEM_CUDA_CHECK(cudaEventRecord(b, stream));
    TANDEM_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    TANDEM_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  TANDEM_CUDA_CHECK(cudaEventDestroy(a));
  TANDEM_CUDA_CHECK(cudaEventDestroy(b));
  return median(ms);
}

// A graph of `syncs` step kernels of `blocks` blocks, overlapped (pdl) or plain.
cudaGraphExec_t chain(cudaStream_t stream, int blocks, int syncs, bool pdl, uint32_t* word) {
  cudaGraph_t graph;
  TANDEM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < syncs; ++i) {
    tandem::kernels::pdl::launch(pdl, step_kernel, dim3(blocks), dim3(kThreads), 0, stream, word);
  }
  TANDEM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  TANDEM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  TANDEM_CUDA_CHECK(cudaGraphDestroy(graph));
  return exec;
}

void print(const char* what, int blocks, float ms, int syncs) {
  std::printf("{\"case\": \"%s\", \"blocks\": %d, \"us_per_sync\": %.3f}\n", what, blocks,
              ms * 1000.0f / float(syncs));
}

}  // namespace

int main(int argc, char** argv) {
  int syncs = 200, reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--syncs")) {
      syncs = std::atoi(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--reps")) {
      reps = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: sync_cost_bench [--syncs N] [--reps N]\n");
      return 2;
    }
  }
  if (syncs < 1 || reps < 1) {
    std::fprintf(stderr, "sync_cost_bench: --syncs and --reps must be positive\n");
    return 2;
  }
  int sms = 0, per_sm = 0;
  TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  TANDEM_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, barrier_kernel<true>, kThreads, 0));
  uint32_t* dev = nullptr;
  TANDEM_CUDA_CHECK(cudaMalloc(&dev, (kWords + 32) * sizeof(uint32_t)));
  TANDEM_CUDA_CHECK(cudaMemset(dev, 0, (kWords + 32) * sizeof(uint32_t)));
  uint32_t* word = dev + kWords;
  cudaStream_t stream;
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // One block an SM up to five (the persistent small MLP's grid: 608 of 5 x 132).
  for (int per : {1, 2, 4, 5}) {
    const int blocks = per * sms;
    for (bool pdl : {true, false}) {
      cudaGraphExec_t exec = chain(stream, blocks, syncs, pdl, word);
      const float ms =
          time_ms(stream, reps, [&] { TANDEM_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
      print(pdl ? "pdl" : "plain", blocks, ms, syncs);
      TANDEM_CUDA_CHECK(cudaGraphExecDestroy(exec));
    }
    if (per > per_sm) continue;  // a barrier needs the whole grid resident
    const float one = time_ms(stream, reps, [&] {
      barrier_kernel<false><<<blocks, kThreads, 0, stream>>>(dev, word, syncs);
      TANDEM_CUDA_CHECK(cudaGetLastError());
    });
    print("barrier_one_counter", blocks, one, syncs);
    const float two = time_ms(stream, reps, [&] {
      barrier_kernel<true><<<blocks, kThreads, 0, stream>>>(dev, word, syncs);
      TANDEM_CUDA_CHECK(cudaGetLastError());
    });
    print("barrier_two_levels", blocks, two, syncs);
  }
  TANDEM_CUDA_CHECK(cudaStreamDestroy(stream));
  TANDEM_CUDA_CHECK(cudaFree(dev));
  return 0;
}
