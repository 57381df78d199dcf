// Dequantization of the stored formats to fp32, exactly as each format defines its value:
//   fp8:  w[o, i] = e4m3(weight[o, i]) × scale            (scale per tensor, row or block)
//   awq:  w[o, i] = (q[o, i] − z[i / group, o]) × s[i / group, o]
//   gptq: w[o, i] = (q[o, i] − (z[g, o] + zero_offset)) × s[g, o],   g = g_idx[i] or i / group
// in fp32 without intermediate rounding (int4 × fp16 products are exact in fp32). GPU kernels
// that dequantize in fp16 round (q − z) × s to fp16; the difference is below one fp16 ulp.
// The bit layouts are in dequant.cc; docs/quantization.md draws them.
#pragma once

#include <cstdint>
#include <vector>

#include "model/quant_linear.h"
#include "model/safetensors.h"

namespace tandem {

// AutoAWQ's WQLinear_GEMM packs output features c*8 + order[k] into nibble k of int32 c, with
// order = {0, 2, 4, 6, 1, 3, 5, 7}; the inverse says which nibble holds feature c*8 + j.
inline constexpr int kAwqNibbleOf[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// The nibble of its packed int32 that holds element `index` of a run of 8: AWQ packs its
// weights and zero points by output feature in kAwqNibbleOf's order; GPTQ its weights along
// the inputs and its zero points by output feature, both in plain order.
inline int int4_nibble_of(QuantFormat f, int64_t index) {
  return f == QuantFormat::kAwq ? kAwqNibbleOf[index % 8] : int(index % 8);
}

// Rows [row0, row0 + count) of the [out, in] matrix a quantized Linear stands for:
// out[count, in_features] fp32. `weight` is the stored weight (fp8 `weight` or `qweight`).
void dequant_rows(const TensorView& weight, const LinearQuant& q, int64_t row0, int64_t count,
                  float* out);

// Rows [row0, row0 + count) of an AWQ or GPTQ Linear, per quantization group: each row's zero
// point (its qzeros nibble in the format's order, plus GPTQ's zero_offset) and scale, read once
// for a block of rows instead of once per weight. zero[g * count + r], scale[g * count + r].
struct Int4GroupTables {
  std::vector<int32_t> zero;  // [groups, count]
  std::vector<float> scale;   // [groups, count]
};
Int4GroupTables int4_group_tables(const LinearQuant& q, int64_t row0, int64_t count);

// The scale of an FP8 Linear's weight (row, input): the tensor's, the row's, or its block's.
float fp8_scale_of(const LinearQuant& q, int64_t row, int64_t input);

// The 256 e4m3 codes decoded (fp8_e4m3_to_f32), a table built once: a call per weight was most
// of the CPU's FP8 dequantization.
const float* e4m3_table();

// Element `i` of a float tensor (F32/BF16/F16) widened to fp32; scales and biases.
float float_element(const TensorView& t, int64_t i);

}  // namespace tandem
