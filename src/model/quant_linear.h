// One Linear of a loaded checkpoint as its format stores it: the pointers into the WeightStore
// a runner needs besides the stored weight (LayerWeights::q_proj etc.), and the format's
// parameters, copied so the view outlives a moved ModelDir. model/dequant.h reads it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.h"
#include "model/quant_config.h"
#include "model/safetensors.h"

namespace tandem {

// Word `i` of a packed int32 tensor (qweight, qzeros, g_idx) as unsigned bits. Tensor data is
// only as aligned as the file made it: memcpy, never a cast.
inline uint32_t load_u32(const std::byte* p, int64_t i) {
  uint32_t v;
  std::memcpy(&v, p + i * 4, 4);
  return v;
}

struct LinearQuant {
  QuantFormat format = QuantFormat::kNone;  // kNone: the weight is [out, in] floats
  int64_t out_features = 0;
  int64_t in_features = 0;
  // fp8: weight_scale ([] | [1] | [out, 1] | [out]) or weight_scale_inv
  //      ([ceil(out / block_out), ceil(in / block_in)]); awq/gptq: scales [groups, out] F16.
  const TensorView* scale = nullptr;
  const TensorView* zeros = nullptr;        // awq/gptq qzeros [groups, out / 8] I32
  const TensorView* g_idx = nullptr;        // gptq [in] I32 group of each input feature; null:
                                            // i / group_size
  const TensorView* input_scale = nullptr;  // fp8 static activations: [] | [1]
  Fp8ScaleGranularity fp8_scale = Fp8ScaleGranularity::kTensor;
  int64_t block_out = 0;
  int64_t block_in = 0;
  Fp8Activations fp8_activations = Fp8Activations::kNone;
  double activation_scale_ub = 0;
  int64_t group_size = 0;   // -1: one group
  int32_t zero_offset = 0;  // GPTQ v1: 1
};

// The seven projections of one decoder layer; all kNone for a float checkpoint.
struct LayerQuant {
  LinearQuant q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;
};

// The view of `module` (already shape-checked against quantized_linear_tensors). Checks what
// shapes cannot: GPTQ g_idx values are groups that exist (and are i / group_size without
// desc_act, which kernels then ignore), and a sym GPTQ checkpoint's zero points are all 8.
Result<LinearQuant> resolve_linear_quant(const QuantConfig& q, const WeightStore& store,
                                         const std::string& module, int64_t out_features,
                                         int64_t in_features);

}  // namespace tandem
