#include "model/quant_pack.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/dtype.h"

namespace tandem {

namespace {

// AutoAWQ's pack order: nibble k of int32 c holds column c*8 + kAwqOrder[k].
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

float fp8_scale_of(float amax) {
  return amax > 0 ? amax / kFp8E4M3Max : 1.0f;
}

}  // namespace

void quantize_fp8(const float* w, int64_t out, int64_t in, Fp8ScaleGranularity granularity,
                  int64_t block_out, int64_t block_in, uint8_t* q, float* scales) {
  auto amax_of = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    float amax = 0;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * in + c]));
    return amax;
  };
  auto quantize = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, float s) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) q[r * in + c] = f32_to_fp8_e4m3(w[r * in + c] / s);
  };
  switch (granularity) {
    case Fp8ScaleGranularity::kTensor:
      scales[0] = fp8_scale_of(amax_of(0, out, 0, in));
      quantize(0, out, 0, in, scales[0]);
      return;
    case Fp8ScaleGranularity::kChannel:
      for (int64_t r = 0; r < out; ++r) {
        scales[r] = fp8_scale_of(amax_of(r, r + 1, 0, in));
        quantize(r, r + 1, 0, in, scales[r]);
      }
      return;
    case Fp8ScaleGranularity::kBlock: {
      const int64_t block_cols = (in + block_in - 1) / block_in;
      for (int64_t r0 = 0; r0 < out; r0 += block_out) {
        for (int64_t c0 = 0; c0 < in; c0 += block_in) {
          const int64_t r1 = std::min(out, r0 + block_out);
          const int64_t c1 = std::min(in, c0 + block_in);
          float& s = scales[(r0 / block_out) * block_cols + c0 / block_in];
          s = fp8_scale_of(amax_of(r0, r1, c0, c1));
          quantize(r0, r1, c0, c1, s);
        }
      }
      return;
    }
  }
}

Int4Groups quantize_int4(const float* w, int64_t out, int64_t in,
                         const std::vector<int32_t>& group_of, int64_t groups, bool sym,
                         int min_zero) {
  TANDEM_CHECK(int64_t(group_of.size()) == in, "group_of has %zu entries for %lld features",
               group_of.size(), (long long)in);
  Int4Groups r;
  r.q.resize(size_t(out * in));
  r.zeros.resize(size_t(groups * out));
  r.scales.resize(size_t(groups * out));
  std::vector<float> lo(static_cast<size_t>(groups));  // [groups] of one row
  std::vector<float> hi(static_cast<size_t>(groups));
  for (int64_t o = 0; o < out; ++o) {
    // GPTQ's grid always contains 0: min ≤ 0 ≤ max.
    std::fill(lo.begin(), lo.end(), 0.0f);
    std::fill(hi.begin(), hi.end(), 0.0f);
    for (int64_t i = 0; i < in; ++i) {
      const size_t g = size_t(group_of[size_t(i)]);
      lo[g] = std::min(lo[g], w[o * in + i]);
      hi[g] = std::max(hi[g], w[o * in + i]);
    }
    std::vector<float> scale(static_cast<size_t>(groups));  // [groups] fp16-rounded scales of row o
    for (int64_t g = 0; g < groups; ++g) {
      float s = sym ? std::max(-lo[size_t(g)], hi[size_t(g)]) * 2.0f / 15.0f
                    : (hi[size_t(g)] - lo[size_t(g)]) / 15.0f;
      if (!(s > 0)) s = 1.0f;
      const uint16_t s16 = f32_to_f16(s);
      scale[size_t(g)] = f16_to_f32(s16);
      const int zero =
          sym ? 8
              : std::clamp(int(std::nearbyint(-lo[size_t(g)] / scale[size_t(g)])), min_zero, 15);
      r.scales[size_t(g * out + o)] = s16;
      r.zeros[size_t(g * out + o)] = uint8_t(zero);
    }
    for (int64_t i = 0; i < in; ++i) {
      const size_t g = size_t(group_of[size_t(i)]);
      const int zero = r.zeros[g * size_t(out) + size_t(o)];
      const int v = int(std::nearbyint(w[o * in + i] / scale[g])) + zero;
      r.q[size_t(o * in + i)] = uint8_t(std::clamp(v, 0, 15));
    }
  }
  return r;
}

std::vector<int32_t> pack_awq(const uint8_t* values, int64_t rows, int64_t cols) {
  TANDEM_CHECK(cols % 8 == 0, "AWQ packs 8 columns per int32; %lld columns", (long long)cols);
  std::vector<int32_t> packed(size_t(rows * (cols / 8)));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols / 8; ++c) {
      uint32_t word = 0;
      for (int k = 0; k < 8; ++k) {
        const int64_t col = c * 8 + kAwqOrder[k];
        word |= uint32_t(values[r * cols + col] & 15u) << (4 * k);
      }
      packed[size_t(r * (cols / 8) + c)] = int32_t(word);
    }
  }
  return packed;
}

std::vector<int32_t> pack_gptq_qweight(const uint8_t* q, int64_t out, int64_t in) {
  TANDEM_CHECK(in % 8 == 0, "GPTQ packs 8 input features per int32; %lld", (long long)in);
  std::vector<int32_t> packed(size_t((in / 8) * out));
  for (int64_t p = 0; p < in / 8; ++p) {
    for (int64_t o = 0; o < out; ++o) {
      uint32_t word = 0;
      for (int j = 0; j < 8; ++j) word |= uint32_t(q[o * in + p * 8 + j] & 15u) << (4 * j);
      packed[size_t(p * out + o)] = int32_t(word);
    }
  }
  return packed;
}

std::vector<int32_t> pack_gptq_zeros(const uint8_t* zeros, int64_t groups, int64_t out,
                                     int32_t zero_offset) {
  TANDEM_CHECK(out % 8 == 0, "GPTQ packs 8 zero points per int32; %lld", (long long)out);
  std::vector<int32_t> packed(size_t(groups * (out / 8)));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < out / 8; ++c) {
      uint32_t word = 0;
      for (int j = 0; j < 8; ++j) {
        const int stored = int(zeros[g * out + c * 8 + j]) - zero_offset;
        TANDEM_CHECK(stored >= 0 && stored <= 15, "zero point %d cannot be stored with offset %d",
                     stored + zero_offset, zero_offset);
        word |= uint32_t(stored) << (4 * j);
      }
      packed[size_t(g * (out / 8) + c)] = int32_t(word);
    }
  }
  return packed;
}

}  // namespace tandem
