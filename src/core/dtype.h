// Element types of weights, KV pages and activations, and the scalar conversions the CPU runner
// uses. bf16/fp16 are stored as raw uint16_t bits on the host.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tandem {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kI8, kF8E4M3 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // safetensors spelling: "F32", "BF16", ...
std::optional<DType> dtype_from_safetensors(std::string_view name);
// torch_dtype in config.json: "bfloat16", "float16", "float32".
std::optional<DType> dtype_from_torch(std::string_view name);

inline float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(uint32_t(bits) << 16);
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float f);

// FP8 E4M3 as torch.float8_e4m3fn and safetensors' F8_E4M3 store it: bias 7, no infinities,
// 0x7f/0xff are NaN, largest finite ±448, subnormals down to 2^-9.
float fp8_e4m3_to_f32(uint8_t bits);
// Round to nearest even, saturating at ±448 as every FP8 quantizer clamps first; NaN → 0x7f.
uint8_t f32_to_fp8_e4m3(float f);
inline constexpr float kFp8E4M3Max = 448.0f;

}  // namespace tandem
