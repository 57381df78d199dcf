#include "core/dtype.h"

#include <algorithm>
#include <cmath>

namespace tandem {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI64:
      return 8;
    case DType::kU8:
    case DType::kI8:
    case DType::kF8E4M3:
      return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kU8:
      return "U8";
    case DType::kI8:
      return "I8";
    case DType::kF8E4M3:
      return "F8_E4M3";
  }
  return "?";
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kU8,
                  DType::kI8, DType::kF8E4M3}) {
    if (dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_torch(std::string_view name) {
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float16" || name == "half") return DType::kF16;
  if (name == "float32" || name == "float") return DType::kF32;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);          // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);         // overflow -> inf
  if (abs < 0x38800000u) {                                         // subnormal or zero in f16
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;  // 2^24
    return uint16_t(sign | uint16_t(std::nearbyint(scaled)));
  }
  uint32_t mant = abs & 0x7fffffu;
  uint32_t exp = (abs >> 23) - 127 + 15;
  uint32_t half = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // round to nearest even
  return uint16_t(sign | half);
}

float fp8_e4m3_to_f32(uint8_t bits) {
  const int exponent = (bits >> 3) & 15;
  const int mantissa = bits & 7;
  if (exponent == 15 && mantissa == 7) return std::nanf("");
  // Normal: (1 + m/8) * 2^(e - 7) = (8 + m) * 2^(e - 10); subnormal: m/8 * 2^-6 = m * 2^-9.
  const float magnitude = exponent == 0 ? std::ldexp(float(mantissa), -9)
                                        : std::ldexp(float(8 + mantissa), exponent - 10);
  return (bits & 0x80) ? -magnitude : magnitude;
}

uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= kFp8E4M3Max) return sign | 0x7e;
  if (a < 0.015625f) {
    // Subnormal range (below 2^-6): steps of 2^-9; rounding up to 8 gives 0x08, the smallest
    // normal, which is the right encoding.
    return uint8_t(sign | int(std::nearbyint(a * 512.0f)));
  }
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  // Eight steps per binade: q in [8, 16] (exact scaling by a power of two, then RNE).
  int q = int(std::nearbyint(std::ldexp(a, 4 - e)));
  int biased = e - 1 + 7;
  if (q == 16) {
    q = 8;
    ++biased;
  }
  const int bits = std::min((biased << 3) | (q - 8), 0x7e);
  return uint8_t(sign | bits);
}

}  // namespace tandem
