#include "model/dequant.h"

#include <cstring>

#include "core/check.h"
#include "core/dtype.h"

namespace tandem {

namespace {

// AutoAWQ's WQLinear_GEMM packs output features c*8 + order[k] into nibble k of int32 c, with
// order = {0, 2, 4, 6, 1, 3, 5, 7}; the inverse says which nibble holds feature c*8 + j.
constexpr int kAwqNibbleOf[8] = {0, 4, 1, 5, 2, 6, 3, 7};

int awq_nibble(uint32_t packed, int64_t feature) {
  return int((packed >> (4 * kAwqNibbleOf[feature % 8])) & 15u);
}

// GPTQ packs in plain order: element j of a run of 8 is nibble j.
int plain_nibble(uint32_t packed, int64_t index) {
  return int((packed >> (4 * (index % 8))) & 15u);
}

void dequant_fp8(const TensorView& w, const LinearQuant& q, int64_t row0, int64_t count,
                 float* out) {
  const int64_t in = q.in_features;
  const auto* bytes = reinterpret_cast<const uint8_t*>(w.data);
  const int64_t block_cols = q.block_in > 0 ? (in + q.block_in - 1) / q.block_in : 0;
  for (int64_t r = 0; r < count; ++r) {
    const int64_t o = row0 + r;
    const uint8_t* row = bytes + o * in;
    float* dst = out + r * in;
    switch (q.fp8_scale) {
      case Fp8ScaleGranularity::kTensor:
      case Fp8ScaleGranularity::kChannel: {
        const float s =
            float_element(*q.scale, q.fp8_scale == Fp8ScaleGranularity::kTensor ? 0 : o);
        for (int64_t i = 0; i < in; ++i) dst[i] = fp8_e4m3_to_f32(row[i]) * s;
        break;
      }
      case Fp8ScaleGranularity::kBlock: {
        const int64_t block_row = o / q.block_out;
        for (int64_t i = 0; i < in; ++i) {
          const float s = float_element(*q.scale, block_row * block_cols + i / q.block_in);
          dst[i] = fp8_e4m3_to_f32(row[i]) * s;
        }
        break;
      }
    }
  }
}

// qweight [in, out/8]: row i holds input feature i of every output feature.
void dequant_awq(const TensorView& w, const LinearQuant& q, int64_t row0, int64_t count,
                 float* out) {
  const int64_t in = q.in_features;
  const int64_t packed_cols = q.out_features / 8;
  for (int64_t i = 0; i < in; ++i) {
    const int64_t g = i / q.group_size;
    for (int64_t r = 0; r < count; ++r) {
      const int64_t o = row0 + r;
      const int quant = awq_nibble(load_u32(w.data, i * packed_cols + o / 8), o);
      const int zero = awq_nibble(load_u32(q.zeros->data, g * packed_cols + o / 8), o);
      const float scale = float_element(*q.scale, g * q.out_features + o);
      out[r * in + i] = float(quant - zero) * scale;
    }
  }
}

// qweight [in/8, out]: row p holds input features 8p..8p+7 of every output feature.
void dequant_gptq(const TensorView& w, const LinearQuant& q, int64_t row0, int64_t count,
                  float* out) {
  const int64_t in = q.in_features;
  const int64_t out_features = q.out_features;
  const int64_t packed_cols = out_features / 8;
  for (int64_t i = 0; i < in; ++i) {
    int64_t g = q.group_size == -1 ? 0 : i / q.group_size;
    if (q.g_idx != nullptr) g = int32_t(load_u32(q.g_idx->data, i));
    for (int64_t r = 0; r < count; ++r) {
      const int64_t o = row0 + r;
      const int quant = plain_nibble(load_u32(w.data, (i / 8) * out_features + o), i);
      const int zero =
          plain_nibble(load_u32(q.zeros->data, g * packed_cols + o / 8), o) + q.zero_offset;
      const float scale = float_element(*q.scale, g * out_features + o);
      out[r * in + i] = float(quant - zero) * scale;
    }
  }
}

}  // namespace

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
      dequant_awq(weight, q, row0, count, out);
      return;
    case QuantFormat::kGptq:
      dequant_gptq(weight, q, row0, count, out);
      return;
    case QuantFormat::kNone:
      break;
  }
  TANDEM_CHECK(false, "dequant_rows on %s, which is not quantized", weight.name.c_str());
}

}  // namespace tandem
