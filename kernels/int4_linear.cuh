// W4A16 Linears for AWQ and GPTQ checkpoints: y[m, n] = x[m, k] · W^T with 4-bit weights, bf16
// activations and fp32 accumulation. Both formats are repacked at load
// (model/device_quant_layout.h) into the one layout below, so one set of kernels serves both:
//   w[r, i] = (q[r, i] − zero[r, g]) × scale[r, g],   g = i / group_size
// computed exactly in fp32 (an int4 difference times an fp16 scale is exact), where i counts
// input features in the packed order; packed feature i multiplies x[perm[i]] (GPTQ act-order) or
// x[i] without a permutation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "normed_rows.cuh"
#include "rope_kv.cuh"

namespace tandem::kernels {

// The GEMV multiplies on the tensor cores (mma.m16n8k16, bf16 in, fp32 out): a warp takes 16
// rows, and the layout hands each lane its A-fragment as stored, 8 nibbles per word, so a lane
// reads its weights with one 16-byte load per 64 features and needs no shuffles.
//
// qweight: tile T (rows 16T..16T+15) is 2k words at T * 2k. Its 32-feature blocks b = 0..k/32-1
// go in pairs: pair P = b / 2 is 128 words at P * 128, lane L's four words at L * 4 + (b % 2) * 2
// + s; when k / 32 is odd the last block is 64 words, lane L's two at (k / 64) * 128 + L * 2 + s.
// Word s of a block (s = 0, 1) holds k-step s (features 32b + 16s ..+15) of rows j = L / 4 and
// j + 8, c = 2 * (L % 4), as the mma's A registers a0..a3 want them:
//   nibble m + 4e (m = 0..3, e = 0..1) = q[16T + j + 8 * (m % 2), 32b + 16s + c + 8 * (m / 2) + e]
// so `(word >> 4m) & 0x000F000F` is register m's two values, e = 0 in the low half.
// scales, zeros: [tiles, groups, 8, 2]; [T, g, j, h] is row 16T + 8h + j, so lane L reads rows
// j and j + 8 of one group as one half2 / one pair of bytes.
struct Int4Matrix {
  const uint32_t* qweight = nullptr;  // [ceil(n / 16), 2k] words, 16-byte aligned (above)
  const __half* scales = nullptr;     // [ceil(n / 16), k / group_size, 8, 2]
  const uint8_t* zeros = nullptr;     // [ceil(n / 16), k / group_size, 8, 2] zero points (0..16)
  const int32_t* perm = nullptr;      // [k] or null
  int32_t n = 0;
  int32_t k = 0;           // k % 32 == 0
  int32_t group_size = 0;  // k % group_size == 0, group_size % 32 == 0
};

// Decode sizes: the weights stream once for all m tokens, each unpacked fragment multiplied
// by up to 4 tiles of 8 tokens (the mma's N). Speculative verify passes (batch × (k + 1) rows)
// and decode batches up to 32 stay on the GEMV. Measured on the H200: a 5-row verify of the
// AWQ 7B that dequantized every Linear for cuBLASLt took 12.2 ms (3.9 ms on the GEMV), and a
// 20-row one at batch 4 12.9 ms against 3.85 ms for a plain batch-4 step.
constexpr int32_t kInt4GemvMaxTokens = 32;

// 1 <= m <= kInt4GemvMaxTokens. y row t starts at y + t * ldy (ldy >= n), bf16 or fp32. Each
// block stages x (gathered through perm) in shared memory, in chunks when m * k is large, and
// sums its warps' k-slices in a fixed order: reruns are bit-identical.
void launch_int4_gemv(const __nv_bfloat16* x,  // [m, k] in, row stride k, 16-byte aligned
                      const Int4Matrix& w, int32_t m,
                      void* y,  // [m, ldy] out
                      int32_t ldy, bool out_f32, cudaStream_t stream,
                      bool pdl = false);  // may overlap the launch before (pdl.cuh, sm_90+)

// One-token decode with the layer's RMSNorms folded in (the int4 form of the bf16 fold, gemv.cuh):
// the GEMVs that read a norm take x = RMSNorm(residual) as NormedRows and normalise it per block,
// and the GEMVs that feed the residual add their bf16-rounded output to it. A layer runs 5
// launches instead of 7. Each block reads its tokens' fp32 rows whole, hence one token; the
// runner folds small models only (CudaRunner::folds_int4_norms: the 7B's 1.5 waves of gate|up
// blocks pay that read twice).
constexpr int32_t kInt4FoldMaxTokens = 1;

// residual[t, r] += bf16(x · W^T)[t, r]: launch_int4_gemv (bf16 out) and launch_add_rmsnorm's
// residual add, the same bits. m <= kInt4FoldMaxTokens.
void launch_int4_gemv_add(const __nv_bfloat16* x,  // [m, k] in
                          const Int4Matrix& w, int32_t m,
                          float* residual,  // [m, n] in and out
                          cudaStream_t stream, bool pdl = false);

// Decode projections with their activation fused into the GEMV's epilogue: launch_int4_gemv
// (bf16 out) followed by the separate kernel, as one launch without the round trip of the
// projection's output. The sums may differ from launch_int4_gemv's in their last bits where the
// fused plan splits k differently (whole heads a block for RoPE, gate and up rows together). Where
// `*_fuses` is false (group sizes other than 128, more than 16 tokens, other head sizes, no
// thread-block clusters), run the two launches.
//
// w = gate | up ([2 * width, k], width % 16 == 0): act = silu(x · gate^T) * (x · up^T), as
// launch_silu_mul.
bool int4_swiglu_fuses(const Int4Matrix& w, int32_t m);
void launch_int4_gemv_swiglu(const __nv_bfloat16* x,  // [m, k] in
                             const Int4Matrix& w, int32_t m,
                             __nv_bfloat16* act,  // [m, width] out
                             cudaStream_t stream, bool pdl = false);
// The same with x = RMSNorm(residual), m <= kInt4FoldMaxTokens.
void launch_int4_gemv_swiglu(const NormedRows& x, const Int4Matrix& w, int32_t m,
                             __nv_bfloat16* act, cudaStream_t stream, bool pdl = false);

// w = q | k | v ([(H + 2 KVH) * D, k]): RoPE, the bias and the K/V page write as
// launch_rope_kv_write (out.s.num_tokens == m).
bool int4_qkv_rope_fuses(const Int4Matrix& w, int32_t m, const RopeKvShape& s);
void launch_int4_qkv_rope_gemv(const __nv_bfloat16* x,  // [m, k] in
                               const Int4Matrix& w, int32_t m, const RopeKvTarget& out,
                               cudaStream_t stream, bool pdl = false);
// The same with x = RMSNorm(residual), m <= kInt4FoldMaxTokens.
void launch_int4_qkv_rope_gemv(const NormedRows& x, const Int4Matrix& w, int32_t m,
                               const RopeKvTarget& out, cudaStream_t stream, bool pdl = false);

// Prefill sizes: the whole matrix as bf16 in the original feature order (out[r, perm[i]] for a
// permuted matrix), for a cuBLASLt GEMM with the unpermuted activations. The bf16 rounding of
// (q − zero) × scale is the one precision step this path adds (as vLLM's bf16 W4A16 kernels).
void launch_int4_dequant(const Int4Matrix& w,
                         __nv_bfloat16* out,  // [n, k] out
                         cudaStream_t stream);

}  // namespace tandem::kernels
