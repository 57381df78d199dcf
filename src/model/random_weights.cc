#include "model/random_weights.h"

#include <cstring>

#include "core/check.h"

namespace tandem::mkmodel {

namespace {

// splitmix64's finaliser: a bijective mix with full avalanche; counter-based, so no state.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Irwin-Hall with four 16-bit uniforms from one hash: mean 2, variance 4/12, rescaled to a
// unit normal (tails cut at 3.46 sigma). Box-Muller needs log/sqrt/cos per pair and would
// make the 15 GB presets several times slower for no benefit to random weights.
inline float unit_normal(uint64_t h) {
  uint32_t s = uint32_t(h & 0xffff) + uint32_t((h >> 16) & 0xffff) + uint32_t((h >> 32) & 0xffff) +
               uint32_t(h >> 48);
  constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) per unit of the 16-bit sum
  return (float(s) - 2.0f * 65535.5f) * kScale;
}

constexpr float kStd = 0.02f;

}  // namespace

uint64_t tensor_key(uint64_t seed, uint64_t salt, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the name
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return mix64(h ^ mix64(seed + 0x9e3779b97f4a7c15ull * (salt + 1)));
}

float weight_value(uint64_t key, Init init, uint64_t index) {
  if (init == Init::kOnes) return 1.0f;
  return kStd * unit_normal(mix64(key + index * 0x9e3779b97f4a7c15ull));
}

void fill_weights(uint64_t key, Init init, uint64_t first, size_t count, DType dtype,
                  std::byte* out) {
  switch (dtype) {
    case DType::kBF16:
      for (size_t i = 0; i < count; ++i) {
        uint16_t v = f32_to_bf16(weight_value(key, init, first + i));
        std::memcpy(out + 2 * i, &v, 2);
      }
      return;
    case DType::kF16:
      for (size_t i = 0; i < count; ++i) {
        uint16_t v = f32_to_f16(weight_value(key, init, first + i));
        std::memcpy(out + 2 * i, &v, 2);
      }
      return;
    case DType::kF32:
      for (size_t i = 0; i < count; ++i) {
        float v = weight_value(key, init, first + i);
        std::memcpy(out + 4 * i, &v, 4);
      }
      return;
    default:
      TANDEM_CHECK(false, "fill_weights: dtype %s is not a float type",
                   std::string(dtype_name(dtype)).c_str());
  }
}

}  // namespace tandem::mkmodel
