#include "runner/cuda/device_linear.h"

#include <algorithm>
#include <limits>

#include "core/check.h"
#include "kernels/fp8_linear.cuh"
#include "kernels/gemm.cuh"
#include "kernels/gemm_skinny.cuh"
#include "kernels/gemv.cuh"
#include "kernels/int4_linear.cuh"

namespace tandem {
namespace {

kernels::Int4Matrix int4_matrix(const DeviceLinearPart& p, int32_t k) {
  kernels::Int4Matrix m;
  m.qweight = p.weight.as<uint32_t>();
  m.scales = p.scales.as<__half>();
  m.zeros = p.zeros.as<uint8_t>();
  m.perm = p.perm.bytes() > 0 ? p.perm.as<int32_t>() : nullptr;
  m.n = p.rows;
  m.k = k;
  m.group_size = p.group_size;
  return m;
}

kernels::Fp8Matrix fp8_matrix(const DeviceLinearPart& p, int32_t k) {
  kernels::Fp8Matrix m;
  m.weight = p.weight.as<uint8_t>();
  m.scale = p.scales.as<float>();
  m.block = p.fp8_block;
  m.n = p.rows;
  m.k = k;
  return m;
}

bool w8a8(const DeviceLinearPart& p) {
  return p.format == QuantFormat::kFp8 && p.fp8_activations != Fp8Activations::kNone;
}

// Input features per activation scale: per token, or per 128 features for block fp8.
int32_t fp8_group(const DeviceLinearPart& p, int32_t k) {
  return p.fp8_activations == Fp8Activations::kDynamicPerTokenGroup ? kernels::kFp8Block : k;
}

// Whether m rows take the part's decode kernel rather than a GEMM.
bool decode_sized(const DeviceLinearPart& p, int32_t m) {
  switch (p.format) {
    case QuantFormat::kNone:
      return m <= kernels::kGemvMaxTokens;
    case QuantFormat::kAwq:
    case QuantFormat::kGptq:
      return m <= kernels::kInt4GemvMaxTokens;
    case QuantFormat::kFp8:
      return m <= kernels::kFp8GemvMaxTokens;
  }
  return false;
}

// A W8A8 part on its activations already in s.xq / s.x_scale (`group` features a scale): the
// GEMV at decode sizes, else the FP8 GEMM.
// pdl: the GEMV may overlap the launch before it (the GEMM never does).
void run_w8a8_quantized(const DeviceLinearPart& p, int32_t k, int32_t ldy, int32_t group, int32_t m,
                        void* yp, bool out_f32, const LinearScratch& s, cudaStream_t stream,
                        bool pdl) {
  if (decode_sized(p, m)) {
    kernels::launch_fp8_gemv(s.xq.as<uint8_t>(), s.x_scale.as<float>(), group, fp8_matrix(p, k), m,
                             yp, ldy, out_f32, stream, pdl);
  } else {
    s.fp8_gemm->run(s.xq.as<uint8_t>(), s.x_scale.as<float>(), fp8_matrix(p, k), m, yp, ldy,
                    out_f32, stream);
  }
}

// A W8A8 part's activations into s.xq / s.x_scale. pdl: may overlap the launch before.
void quantize_part_input(const DeviceLinearPart& p, int32_t k, const __nv_bfloat16* x, int32_t m,
                         const LinearScratch& s, cudaStream_t stream, bool pdl) {
  const float* static_scale = p.input_scale.bytes() > 0 ? p.input_scale.as<float>() : nullptr;
  kernels::launch_fp8_quantize(x, m, k, fp8_group(p, k), static_scale, p.activation_scale_ub,
                               s.xq.as<uint8_t>(), s.x_scale.as<float>(), stream, pdl);
}

}  // namespace

int32_t linear_decode_rows_limit(const DeviceLinear& w) {
  int32_t limit = std::numeric_limits<int32_t>::max();
  for (const DeviceLinearPart& p : w.parts) {
    if (p.format == QuantFormat::kAwq || p.format == QuantFormat::kGptq) {
      limit = std::min(limit, kernels::kInt4GemvMaxTokens);
    }
  }
  return limit;
}

bool single_int4_matrix(const DeviceLinear& w, kernels::Int4Matrix* out) {
  if (w.parts.size() != 1) return false;
  const DeviceLinearPart& p = w.parts[0];
  if (p.format != QuantFormat::kAwq && p.format != QuantFormat::kGptq) return false;
  *out = int4_matrix(p, w.k);
  return true;
}

bool single_w8a8_matrix(const DeviceLinear& w, kernels::Fp8Matrix* out, int32_t* group) {
  if (w.parts.size() != 1 || !w8a8(w.parts[0])) return false;
  *out = fp8_matrix(w.parts[0], w.k);
  *group = fp8_group(w.parts[0], w.k);
  return true;
}

void quantize_linear_input(const DeviceLinear& w, const __nv_bfloat16* x, int32_t m,
                           const LinearScratch& s, cudaStream_t stream, bool pdl) {
  TANDEM_CHECK(w.parts.size() == 1 && w8a8(w.parts[0]));
  if (m > 0) quantize_part_input(w.parts[0], w.k, x, m, s, stream, pdl);
}

void run_linear(const DeviceLinear& w, const __nv_bfloat16* x, int32_t m, void* y, bool out_f32,
                const LinearScratch& s, cudaStream_t stream, bool pdl) {
  if (m == 0) return;
  const size_t esize = out_f32 ? 4 : 2;
  for (const DeviceLinearPart& p : w.parts) {
    void* yp = static_cast<std::byte*>(y) + size_t(p.row0) * esize;
    const bool decode = decode_sized(p, m);
    switch (p.format) {
      case QuantFormat::kNone:
        // 2-32 rows (a verify pass, a small batch): the skinny GEMM where it beats cuBLASLt.
        if (m >= kernels::kSkinnyMinTokens && kernels::skinny_gemm_wins(m, p.rows, w.k)) {
          kernels::launch_skinny_gemm(x, p.weight.as<__nv_bfloat16>(), m, p.rows, w.k, yp, out_f32,
                                      stream, w.n, -1, pdl);
        } else if (decode) {
          kernels::launch_gemv(x, p.weight.as<__nv_bfloat16>(), m, p.rows, w.k, yp, out_f32, stream,
                               w.n, pdl);
        } else {
          s.gemm->run(x, p.weight.as<__nv_bfloat16>(), m, p.rows, w.k, yp, out_f32, stream, w.n);
        }
        break;
      case QuantFormat::kAwq:
      case QuantFormat::kGptq:
        if (decode) {
          kernels::launch_int4_gemv(x, int4_matrix(p, w.k), m, yp, w.n, out_f32, stream, pdl);
        } else {
          kernels::launch_int4_dequant(int4_matrix(p, w.k), s.dequant.as<__nv_bfloat16>(), stream);
          s.gemm->run(x, s.dequant.as<__nv_bfloat16>(), m, p.rows, w.k, yp, out_f32, stream, w.n);
        }
        break;
      case QuantFormat::kFp8:
        if (!w8a8(p)) {
          if (decode) {
            kernels::launch_fp8_gemv_a16(x, fp8_matrix(p, w.k), m, yp, w.n, out_f32, stream);
          } else {
            kernels::launch_fp8_dequant(fp8_matrix(p, w.k), s.dequant.as<__nv_bfloat16>(), stream);
            s.gemm->run(x, s.dequant.as<__nv_bfloat16>(), m, p.rows, w.k, yp, out_f32, stream, w.n);
          }
          break;
        }
        quantize_part_input(p, w.k, x, m, s, stream, pdl);
        run_w8a8_quantized(p, w.k, w.n, fp8_group(p, w.k), m, yp, out_f32, s, stream, pdl);
        break;
    }
  }
}

bool token_fp8_input(const DeviceLinear& w, TokenFp8Input* input) {
  if (w.parts.size() != 1 || !w8a8(w.parts[0]) || fp8_group(w.parts[0], w.k) != w.k) return false;
  const DeviceLinearPart& p = w.parts[0];
  input->static_scale = p.input_scale.bytes() > 0 ? p.input_scale.as<float>() : nullptr;
  input->scale_ub = p.activation_scale_ub;
  return true;
}

void run_linear_prequantized(const DeviceLinear& w, int32_t m, void* y, bool out_f32,
                             const LinearScratch& s, cudaStream_t stream, bool pdl) {
  TokenFp8Input input;
  TANDEM_CHECK(token_fp8_input(w, &input));
  if (m == 0) return;
  run_w8a8_quantized(w.parts[0], w.k, w.n, /*group=*/w.k, m, y, out_f32, s, stream, pdl);
}

void prepare_linear(const DeviceLinear& w, int32_t max_m, bool out_f32, const LinearScratch& s) {
  for (const DeviceLinearPart& p : w.parts) {
    if (w8a8(p)) {
      s.fp8_gemm->prepare(max_m, p.rows, w.k, p.fp8_block, out_f32);
    } else {
      s.gemm->prepare(max_m, p.rows, w.k, out_f32);
    }
  }
}

int64_t dequant_scratch_elements(const DeviceLinear& w) {
  int64_t most = 0;
  for (const DeviceLinearPart& p : w.parts)
    if (p.format != QuantFormat::kNone && !w8a8(p)) most = std::max(most, int64_t(p.rows) * w.k);
  return most;
}

bool needs_fp8_gemm(const DeviceLinear& w) {
  return std::any_of(w.parts.begin(), w.parts.end(),
                     [](const DeviceLinearPart& p) { return w8a8(p); });
}

}  // namespace tandem
