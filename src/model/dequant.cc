#include "model/dequant.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"

namespace tandem {

namespace {

// Rows an int4 dequantization takes at a time (cpu_ops.cc linear's blocks): its tables and
// per-row words stay small.
constexpr int64_t kInt4RowsAtOnce = 16;

void dequant_fp8(const TensorView& w, const LinearQuant& q, int64_t row0, int64_t count,
                 float* out) {
  const int64_t in = q.in_features;
  const auto* bytes = reinterpret_cast<const uint8_t*>(w.data);
  const float* e4m3 = e4m3_table();
  // Runs of inputs that share a scale: the whole row, or a block's width.
  const int64_t run = q.fp8_scale == Fp8ScaleGranularity::kBlock ? q.block_in : in;
  for (int64_t r = 0; r < count; ++r) {
    const int64_t o = row0 + r;
    const uint8_t* row = bytes + o * in;
    float* dst = out + r * in;
    for (int64_t i0 = 0; i0 < in; i0 += run) {
      const float s = fp8_scale_of(q, o, i0);
      const int64_t i1 = std::min(in, i0 + run);
      for (int64_t i = i0; i < i1; ++i) dst[i] = e4m3[row[i]] * s;
    }
  }
}

// qweight [in, out/8]: row i holds input feature i of every output feature.
void dequant_awq(const TensorView& w, const LinearQuant& q, int64_t row0, int64_t count,
                 float* out) {
  const int64_t in = q.in_features;
  const int64_t packed_cols = q.out_features / 8;
  const Int4GroupTables t = int4_group_tables(q, row0, count);
  int32_t column[kInt4RowsAtOnce], shift[kInt4RowsAtOnce];  // [count] each row's word, nibble
  for (int64_t r = 0; r < count; ++r) {
    column[r] = int32_t((row0 + r) / 8);
    shift[r] = 4 * int4_nibble_of(QuantFormat::kAwq, row0 + r);
  }
  for (int64_t i = 0; i < in; ++i) {
    const int64_t g = i / q.group_size;
    const int32_t* zero = t.zero.data() + g * count;
    const float* scale = t.scale.data() + g * count;
    for (int64_t r = 0; r < count; ++r) {
      const uint32_t word = load_u32(w.data, i * packed_cols + column[r]);
      const int quant = int((word >> shift[r]) & 15u);
      out[r * in + i] = float(quant - zero[r]) * scale[r];
    }
  }
}

// qweight [in/8, out]: row p holds input features 8p..8p+7 of every output feature.
void dequant_gptq(const TensorView& w, const LinearQuant& q, int64_t row0, int64_t count,
                  float* out) {
  const int64_t in = q.in_features;
  const int64_t out_features = q.out_features;
  const Int4GroupTables t = int4_group_tables(q, row0, count);
  for (int64_t i = 0; i < in; ++i) {
    int64_t g = q.group_size == -1 ? 0 : i / q.group_size;
    if (q.g_idx != nullptr) g = int32_t(load_u32(q.g_idx->data, i));
    const int32_t* zero = t.zero.data() + g * count;
    const float* scale = t.scale.data() + g * count;
    const int shift = 4 * int4_nibble_of(QuantFormat::kGptq, i);
    for (int64_t r = 0; r < count; ++r) {
      const int quant = int((load_u32(w.data, (i / 8) * out_features + row0 + r) >> shift) & 15u);
      out[r * in + i] = float(quant - zero[r]) * scale[r];
    }
  }
}

}  // namespace

Int4GroupTables int4_group_tables(const LinearQuant& q, int64_t row0, int64_t count) {
  const int64_t groups = q.scale->numel() / q.out_features;
  const int64_t packed_cols = q.out_features / 8;
  const int offset = q.format == QuantFormat::kGptq ? int(q.zero_offset) : 0;
  Int4GroupTables t;
  t.zero.resize(size_t(groups * count));
  t.scale.resize(size_t(groups * count));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t r = 0; r < count; ++r) {
      const int64_t o = row0 + r;
      const uint32_t z = load_u32(q.zeros->data, g * packed_cols + o / 8);
      t.zero[size_t(g * count + r)] = int((z >> (4 * int4_nibble_of(q.format, o))) & 15u) + offset;
      t.scale[size_t(g * count + r)] = float_element(*q.scale, g * q.out_features + o);
    }
  }
  return t;
}

float fp8_scale_of(const LinearQuant& q, int64_t row, int64_t input) {
  switch (q.fp8_scale) {
    case Fp8ScaleGranularity::kTensor:
      return float_element(*q.scale, 0);
    case Fp8ScaleGranularity::kChannel:
      return float_element(*q.scale, row);
    case Fp8ScaleGranularity::kBlock: {
      const int64_t block_cols = (q.in_features + q.block_in - 1) / q.block_in;
      return float_element(*q.scale, (row / q.block_out) * block_cols + input / q.block_in);
    }
  }
  return 0;
}

const float* e4m3_table() {
  static const std::array<float, 256> values = [] {
    std::array<float, 256> v{};
    for (int c = 0; c < 256; ++c) v[size_t(c)] = fp8_e4m3_to_f32(uint8_t(c));
    return v;
  }();
  return values.data();
}

float float_element(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, t.data + i * 4, 4);
      return v;
    }
    case DType::kBF16:
    case DType::kF16: {
      uint16_t v;
      std::memcpy(&v, t.data + i * 2, 2);
      return t.dtype == DType::kBF16 ? bf16_to_f32(v) : f16_to_f32(v);
    }
    default:
      TANDEM_CHECK(false, "%s has dtype %s; the loader admits float scales only", t.name.c_str(),
                   std::string(dtype_name(t.dtype)).c_str());
  }
  return 0;
}

void dequant_rows(const TensorView& weight, const LinearQuant& q, int64_t row0, int64_t count,
                  float* out) {
  TANDEM_CHECK(row0 >= 0 && count >= 0 && row0 + count <= q.out_features,
               "rows [%lld, +%lld) outside %s's %lld", (long long)row0, (long long)count,
               weight.name.c_str(), (long long)q.out_features);
  switch (q.format) {
    case QuantFormat::kFp8:
      dequant_fp8(weight, q, row0, count, out);
      return;
    case QuantFormat::kAwq:
    case QuantFormat::kGptq:
      for (int64_t r = 0; r < count; r += kInt4RowsAtOnce) {
        const int64_t n = std::min(kInt4RowsAtOnce, count - r);
        float* dst = out + r * q.in_features;
        if (q.format == QuantFormat::kAwq) {
          dequant_awq(weight, q, row0 + r, n, dst);
        } else {
          dequant_gptq(weight, q, row0 + r, n, dst);
        }
      }
      return;
    case QuantFormat::kNone:
      break;
  }
  TANDEM_CHECK(false, "dequant_rows on %s, which is not quantized", weight.name.c_str());
}

}  // namespace tandem
