// Helpers for gpu-suite tests: seeded random bf16 data, device copies, poisoned outputs and the
// relative-error measure ‖out − ref‖ / ‖ref‖ (NaN never passes).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda_check.cuh"

namespace tandem::gpu_test {

// Host bf16 bits with values in [-scale, scale].
inline std::vector<uint16_t> random_bf16(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(d(g));
  return v;
}

inline std::vector<float> random_f32(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

inline std::vector<float> to_f32(const std::vector<uint16_t>& b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_f32(b[i]);
  return f;
}

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    TANDEM_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T) + 16));
  }
  template <typename H>
  explicit Dev(const std::vector<H>& host) : Dev(host.size()) {
    static_assert(sizeof(H) == sizeof(T));
    TANDEM_CUDA_CHECK(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  // 0xff bytes: NaN for floats and bf16, -1 for ints; an unwritten element shows up.
  void poison() { TANDEM_CUDA_CHECK(cudaMemset(p, 0xff, n * sizeof(T))); }
  template <typename H>
  std::vector<H> get() const {
    static_assert(sizeof(H) == sizeof(T));
    TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<H> h(n);
    TANDEM_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

inline double rel_error(const std::vector<float>& out, const std::vector<double>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (double(out[i]) - ref[i]) * (double(out[i]) - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1.0));
}

inline bool same_bits(const void* a, const void* b, size_t bytes) {
  return std::memcmp(a, b, bytes) == 0;
}

}  // namespace tandem::gpu_test
