// Quantizing and packing: the inverse of dequant.h, for mkmodel's random quantized checkpoints
// and load-time FP8 (--quantization fp8). Round-to-nearest quantizers, as AutoFP8, AutoAWQ and
// GPTQ's RTN fallback compute them; the packings are the formats' own.
#pragma once

#include <cstdint>
#include <vector>

#include "model/quant_config.h"

namespace tandem {

// w[out, in] → q[out, in] e4m3 bytes and scales: [1] (tensor), [out] (channel) or
// [ceil(out / block_out), ceil(in / block_in)] (block); scale = amax / 448 of its part (1 when
// the part is all zeros), q = e4m3(w / scale).
void quantize_fp8(const float* w, int64_t out, int64_t in, Fp8ScaleGranularity granularity,
                  int64_t block_out, int64_t block_in, uint8_t* q, float* scales);

// Asymmetric (or, with sym, symmetric around 8) 4-bit round-to-nearest per group of input
// features: group_of[in] names each feature's group (i / group_size, or a GPTQ act-order g_idx).
// Scales are rounded to fp16 before q is computed, so (q − zero) × scale is what was stored.
struct Int4Groups {
  std::vector<uint8_t> q;        // [out, in] 0..15
  std::vector<uint8_t> zeros;    // [groups, out] min_zero..15
  std::vector<uint16_t> scales;  // [groups, out] fp16 bits
};
Int4Groups quantize_int4(const float* w, int64_t out, int64_t in,
                         const std::vector<int32_t>& group_of, int64_t groups, bool sym,
                         int min_zero);

// AutoAWQ GEMM: values[rows, cols] → [rows, cols / 8], nibble k of int32 c = column
// c*8 + {0, 2, 4, 6, 1, 3, 5, 7}[k]. qweight packs q transposed to [in, out]; qzeros packs
// zeros [groups, out].
std::vector<int32_t> pack_awq(const uint8_t* values, int64_t rows, int64_t cols);
// GPTQ qweight: q[out, in] → [in / 8, out], nibble j of row p = input feature 8p + j.
std::vector<int32_t> pack_gptq_qweight(const uint8_t* q, int64_t out, int64_t in);
// GPTQ qzeros: zeros[groups, out] → [groups, out / 8] storing zero − zero_offset (v1: 1).
std::vector<int32_t> pack_gptq_zeros(const uint8_t* zeros, int64_t groups, int64_t out,
                                     int32_t zero_offset);

}  // namespace tandem
