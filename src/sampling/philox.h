// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the
// counter-based generator behind SamplingRng. The CPU and CUDA samplers include this one header so
// that the n-th draw of a request is the same number on both: plain C++ with no std:: containers,
// marked __host__ __device__ when nvcc compiles it.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif

namespace tandem {

// One Philox-4x32 block: 4 counter words and 2 key words in, 4 random words out.
TANDEM_HOST_DEVICE inline void philox4x32_10(const uint32_t counter[4], const uint32_t key[2],
                                             uint32_t out[4]) {
  constexpr uint32_t kMul0 = 0xD2511F53u;
  constexpr uint32_t kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
  constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kMul0) * c0;
    const uint64_t p1 = uint64_t(kMul1) * c2;
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;  // the key bump after the last round is unused, which is harmless
    k1 += kWeyl1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// Uniform double in [0, 1) for draw `counter` of the stream `seed`: the block at counter words
// (counter lo, counter hi, 0, 0) under key (seed lo, seed hi); the top 53 bits of out[0]:out[1]
// make the mantissa, so every value is exactly k / 2^53.
TANDEM_HOST_DEVICE inline double philox_uniform(uint64_t seed, uint64_t counter) {
  const uint32_t ctr[4] = {uint32_t(counter), uint32_t(counter >> 32), 0u, 0u};
  const uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
  uint32_t out[4];
  philox4x32_10(ctr, key, out);
  const uint64_t bits = ((uint64_t(out[0]) << 32) | out[1]) >> 11;
  return double(bits) * (1.0 / 9007199254740992.0);  // 2^-53
}

}  // namespace tandem
