// Reference dequantization written from the formats' definitions, sharing no code with
// src/model: e4m3 from its closed formula and by exhaustive nearest-code search, AWQ and GPTQ
// unpacking transcribed from AutoAWQ's `unpack_awq` / `reverse_awq_order` /
// `dequantize_gemm` and AutoGPTQ's QuantLinear forward (shift tables, reorder index,
// `zeros + 1`). Results are [out, in] (HF Linear order) in double.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace tandem::testing::ref {

// e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; S.1111.111 is NaN, no infinities.
inline double e4m3_value(uint8_t code) {
  const int s = code >> 7, e = (code >> 3) & 0xF, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double v = e == 0 ? std::pow(2.0, -6) * (m / 8.0) : std::pow(2.0, e - 7) * (1 + m / 8.0);
  return s ? -v : v;
}

// The finite code nearest to x after clamping to ±448; ties go to the even mantissa.
inline uint8_t e4m3_nearest(double x) {
  x = std::fmin(448.0, std::fmax(-448.0, x));
  int best = -1;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c < 256; ++c) {
    const double v = e4m3_value(uint8_t(c));
    if (std::isnan(v) || (std::signbit(v) != std::signbit(x) && v != 0)) continue;
    const double d = std::fabs(v - x);
    if (d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_d = d;
    }
  }
  return uint8_t(best);
}

// AutoAWQ (awq/utils/packing_utils.py).
inline const int AWQ_REVERSE_ORDER[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// qweight [in, out/8], qzeros [in/group, out/8], scales [in/group, out] (as float) → [out, in].
inline std::vector<double> awq_dequantize(const std::vector<int32_t>& qweight,
                                          const std::vector<int32_t>& qzeros,
                                          const std::vector<float>& scales, int64_t in, int64_t out,
                                          int64_t group_size) {
  const int64_t cols = out / 8;
  const int64_t groups = in / group_size;
  // unpack_awq: iweights[:, c*8 + k] = qweight[:, c] >> shifts[k], shifts = 0, 4, ..., 28.
  std::vector<int> iweights(size_t(in * out)), izeros(size_t(groups * out));
  for (int64_t r = 0; r < in; ++r)
    for (int64_t c = 0; c < cols; ++c)
      for (int k = 0; k < 8; ++k)
        iweights[size_t(r * out + c * 8 + k)] =
            int(uint32_t(qweight[size_t(r * cols + c)]) >> (4 * k));
  for (int64_t r = 0; r < groups; ++r)
    for (int64_t c = 0; c < cols; ++c)
      for (int k = 0; k < 8; ++k)
        izeros[size_t(r * out + c * 8 + k)] =
            int(uint32_t(qzeros[size_t(r * cols + c)]) >> (4 * k));
  // reverse_awq_order: reverse_order_tensor = arange(out).view(-1, 8)[:, AWQ_REVERSE_ORDER]
  std::vector<int64_t> reverse_order(static_cast<size_t>(out));
  for (int64_t c = 0; c < cols; ++c)
    for (int j = 0; j < 8; ++j) reverse_order[size_t(c * 8 + j)] = c * 8 + AWQ_REVERSE_ORDER[j];
  std::vector<double> w(size_t(out * in));
  for (int64_t i = 0; i < in; ++i) {
    const int64_t g = i / group_size;  // repeat_interleave(group_size, dim=0)
    for (int64_t o = 0; o < out; ++o) {
      const int q = iweights[size_t(i * out + reverse_order[size_t(o)])] & 15;
      const int z = izeros[size_t(g * out + reverse_order[size_t(o)])] & 15;
      w[size_t(o * in + i)] = double(q - z) * double(scales[size_t(g * out + o)]);
    }
  }
  return w;
}

// AutoGPTQ QuantLinear: qweight [in/8, out], qzeros [groups, out/8], scales [groups, out],
// g_idx [in]; v1 adds 1 to the unpacked zeros (`zeros = zeros + 1`), v2 does not.
inline std::vector<double> gptq_dequantize(const std::vector<int32_t>& qweight,
                                           const std::vector<int32_t>& qzeros,
                                           const std::vector<float>& scales,
                                           const std::vector<int32_t>& g_idx, int64_t in,
                                           int64_t out, bool v1) {
  const int wf[8] = {0, 4, 8, 12, 16, 20, 24, 28};
  const int64_t groups = int64_t(scales.size()) / out;
  std::vector<int> zeros(size_t(groups * out)), weight(size_t(in * out));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < out / 8; ++c)
      for (int j = 0; j < 8; ++j)
        zeros[size_t(g * out + c * 8 + j)] =
            int((uint32_t(qzeros[size_t(g * (out / 8) + c)]) >> wf[j]) & 15u) + (v1 ? 1 : 0);
  for (int64_t p = 0; p < in / 8; ++p)
    for (int j = 0; j < 8; ++j)
      for (int64_t o = 0; o < out; ++o)
        weight[size_t((p * 8 + j) * out + o)] =
            int((uint32_t(qweight[size_t(p * out + o)]) >> wf[j]) & 15u);
  std::vector<double> w(size_t(out * in));
  for (int64_t i = 0; i < in; ++i) {
    const int64_t g = g_idx[size_t(i)];
    for (int64_t o = 0; o < out; ++o)
      w[size_t(o * in + i)] = double(scales[size_t(g * out + o)]) *
                              double(weight[size_t(i * out + o)] - zeros[size_t(g * out + o)]);
  }
  return w;
}

}  // namespace tandem::testing::ref
