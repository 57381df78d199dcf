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
// for packed input feature i, which is input feature perm[i] (or i when perm is empty). Rows are
// stored in tiles of 16 (n rounded up; padding rows have q, zero and scale 0) in the order the
// GEMV's tensor-core fragments read them; kernels/int4_linear.cuh draws the layout.
struct Int4Layout {
  int64_t n = 0;  // output features
  int64_t k = 0;  // input features
  int64_t group_size = 0;
  std::vector<uint32_t> qweight;  // [ceil(n / 16), 2k] words: tile t's 16 × k nibbles
  // [ceil(n / 16), k / group_size, 8, 2] fp16 bits: row 16t + 8h + j of group g at [t, g, j, h]
  std::vector<uint16_t> scales;
  std::vector<uint8_t> zeros;  // same shape and order, 0..16 (the GPTQ v1 offset added)
  std::vector<int32_t> perm;   // [k], or empty

  // Stacks `below`'s rows under this one's (q|k|v, gate|up). Same k, group_size and perm.
  bool can_stack(const Int4Layout& below) const;
  void stack(const Int4Layout& below);
};

// The repacked form of an AWQ or GPTQ Linear. GPTQ act-order (g_idx) becomes a permutation that
// sorts input features by group (stable; left empty when it sorts nothing); kUnsupported errors
// name the field and value the layout cannot hold: act-order groups of unequal size (g_idx),
// group_size not a multiple of 32 or not dividing in_features, in_features not a multiple of 32,
// bf16 scales that fp16 cannot hold exactly.
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
