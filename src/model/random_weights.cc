#include "model/random_weights.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "core/target_clones.h"

namespace tandem::mkmodel {

namespace {

// splitmix64's finaliser: a bijective mix with full avalanche, for keys.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// "lowbias32" (Wellons): a 32-bit bijective hash. Per element we only use 32-bit integer ops
// so the loop vectorises (8 lanes with AVX2); 64-bit multiplies do not.
inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Per-tensor constants for one 2^32-element block of indices.
struct BlockKeys {
  uint32_t k1, k2, k3;
};

BlockKeys block_keys(uint64_t key, uint64_t block) {
  uint64_t a = mix64(key ^ (block * 0xd1b54a32d192ed03ull));
  uint64_t b = mix64(a + 0x9e3779b97f4a7c15ull);
  return {uint32_t(a), uint32_t(a >> 32), uint32_t(b)};
}

constexpr float kStd = 0.02f;
// Irwin-Hall with four 16-bit uniforms: mean 4 * 32767.5, std 65536 / sqrt(3). Rescaled to
// N(0, kStd) with one multiply (one rounding: the same bits with or without FMA or SIMD).
// Box-Muller needs log/sqrt/cos and would make the 15 GB presets several times slower for no
// benefit to random weights; the tails are cut at 3.46 sigma.
constexpr float kScale = kStd * 1.7320508f / 65536.0f;

inline float normal_at(BlockKeys k, uint32_t index) {
  uint32_t h1 = mix32(mix32(index + k.k1) ^ k.k2);
  uint32_t h2 = mix32(h1 ^ k.k3);
  int32_t s = int32_t((h1 & 0xffff) + (h1 >> 16) + (h2 & 0xffff) + (h2 >> 16));
  return float(s - 131070) * kScale;
}

// Round to nearest even; the values are finite, so f32_to_bf16's NaN branch is not needed and
// leaving it out lets the loop vectorise.
inline uint16_t finite_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// Indices [first, first + count) all in one 2^32 block. Compiled for AVX2 and the baseline
// (core/target_clones.h); both produce identical bits (integer ops and one float multiply).
TANDEM_CLONES void normal_bf16(BlockKeys k, uint32_t first, size_t count, uint16_t* out) {
  for (size_t i = 0; i < count; ++i) out[i] = finite_to_bf16(normal_at(k, first + uint32_t(i)));
}

TANDEM_CLONES void normal_f32(BlockKeys k, uint32_t first, size_t count, float* out) {
  for (size_t i = 0; i < count; ++i) out[i] = normal_at(k, first + uint32_t(i));
}

}  // namespace

uint64_t tensor_key(uint64_t seed, uint64_t salt, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the name
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return mix64(h ^ mix64(seed + 0x9e3779b97f4a7c15ull * (salt + 1)));
}

float weight_value(uint64_t key, Init init, uint64_t index) {
  if (init == Init::kOnes) return 1.0f;
  return normal_at(block_keys(key, index >> 32), uint32_t(index));
}

void fill_weights(uint64_t key, Init init, uint64_t first, size_t count, DType dtype,
                  std::byte* out) {
  TANDEM_CHECK(dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32,
               "fill_weights: dtype %s is not a float type",
               std::string(dtype_name(dtype)).c_str());
  const size_t elem = dtype_size(dtype);
  TANDEM_CHECK(reinterpret_cast<uintptr_t>(out) % elem == 0, "fill_weights: unaligned output");
  if (init == Init::kOnes) {
    uint16_t one16 = dtype == DType::kBF16 ? f32_to_bf16(1.0f) : f32_to_f16(1.0f);
    float one32 = 1.0f;
    for (size_t i = 0; i < count; ++i) {
      std::memcpy(out + i * elem, elem == 2 ? static_cast<const void*>(&one16) : &one32, elem);
    }
    return;
  }
  // Split at 2^32-element block boundaries: each block has its own keys.
  while (count > 0) {
    const uint64_t block = first >> 32;
    const size_t in_block =
        size_t(std::min<uint64_t>(count, (block + 1) * (uint64_t{1} << 32) - first));
    const BlockKeys k = block_keys(key, block);
    if (dtype == DType::kBF16) {
      normal_bf16(k, uint32_t(first), in_block, reinterpret_cast<uint16_t*>(out));
    } else if (dtype == DType::kF32) {
      normal_f32(k, uint32_t(first), in_block, reinterpret_cast<float*>(out));
    } else {
      for (size_t i = 0; i < in_block; ++i) {
        uint16_t v = f32_to_f16(normal_at(k, uint32_t(first) + uint32_t(i)));
        std::memcpy(out + i * elem, &v, 2);
      }
    }
    out += in_block * elem;
    first += in_block;
    count -= in_block;
  }
}

}  // namespace tandem::mkmodel
