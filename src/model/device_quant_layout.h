// Quantized Linears repacked on the host into the layouts the CUDA kernels read
// (kernels/int4_linear.cuh, kernels/fp8_linear.cuh). Host code only, so CI tests the repacking
// against model/dequant.h without a GPU: a repacked matrix stands for exactly the same weights.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "model/quant_linear.h"
#include "model/safetensors.h"

namespace tandem {

// AWQ and GPTQ in one layout: w[r, i] = (q[r, i] − zeros[r, g]) × scales[r, g], g = i / group_size,
// for packed input feature i, which is input feature perm[i] (or i when perm is empty).
struct Int4Layout {
  int64_t n = 0;  // output features
  int64_t k = 0;  // input features
  int64_t group_size = 0;
  std::vector<uint32_t> qweight;  // [n, k / 8]: feature 8c+j of row r in bits 4j.. of word c
  std::vector<uint16_t> scales;   // [n, k / group_size] fp16 bits
  std::vector<uint8_t> zeros;     // [n, k / group_size], the GPTQ v1 offset already added
  std::vector<int32_t> perm;      // [k], or empty

  // Stacks `below`'s rows under this one's (q|k|v, gate|up). Same k, group_size and perm.
  bool can_stack(const Int4Layout& below) const;
  void stack(const Int4Layout& below);
};

// The repacked form of an AWQ or GPTQ Linear. GPTQ act-order (g_idx) becomes a permutation that
// sorts input features by group; kUnsupported errors name the field and value the layout cannot
// hold: groups of unequal size, group_size not a multiple of 32, in_features not a multiple of 32.
Result<Int4Layout> repack_int4(const TensorView& qweight, const LinearQuant& q,
                               const std::string& module);

// Host reference of the layout (tests): row r of the [n, k] matrix in the original feature order.
void int4_layout_row(const Int4Layout& w, int64_t r, float* out);

// FP8 weights with one fp32 scale per output row (tensor scales broadcast), or the checkpoint's
// 128 × 128 block scales.
struct Fp8Layout {
  int64_t n = 0;
  int64_t k = 0;
  bool block = false;
  std::vector<uint8_t> weight;  // [n, k] e4m3
  std::vector<float> scale;     // [n], or [ceil(n / 128), ceil(k / 128)] when block
  float input_scale = 0;        // static activation scale; 0 when dynamic or weight-only

  // Same k, block-ness and input scale; block matrices also need n % 128 == 0 above.
  bool can_stack(const Fp8Layout& below) const;
  void stack(const Fp8Layout& below);
};

// kUnsupported names weight_block_size when blocks are not 128 × 128, and in_features when not a
// multiple of 16.
Result<Fp8Layout> repack_fp8(const TensorView& weight, const LinearQuant& q,
                             const std::string& module);

}  // namespace tandem
