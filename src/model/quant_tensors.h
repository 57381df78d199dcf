// The tensors a quantized Linear is stored as, in the names and shapes the published formats
// use, and the shape conditions a format puts on a Linear. The loader checks a checkpoint
// against this list and mkmodel writes it, so the two cannot drift apart.
//
//   fp8  (fp8, compressed-tensors, fbgemm_fp8)
//     <m>.weight            F8_E4M3  [out, in]
//     <m>.weight_scale      float    [] or [1] (tensor) | [out, 1] or [out] (channel)
//     <m>.weight_scale_inv  float    [ceil(out / block_out), ceil(in / block_in)] (block)
//     <m>.input_scale       float    [] or [1] (static activation scales only)
//   awq  (AutoAWQ GEMM)
//     <m>.qweight  I32    [in, out / 8]        8 nibbles per int32, interleaved order
//     <m>.qzeros   I32    [in / group, out / 8]
//     <m>.scales   F16    [in / group, out]
//   gptq (AutoGPTQ / GPTQModel)
//     <m>.qweight  I32    [in / 8, out]        8 nibbles per int32 along the input features
//     <m>.qzeros   I32    [groups, out / 8]    groups = ceil(in / group), 1 for group -1
//     <m>.scales   F16    [groups, out]
//     <m>.g_idx    I32    [in]                 required with desc_act, optional otherwise
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/quant_config.h"
#include "model/safetensors.h"
#include "model/weight_names.h"

namespace tandem {

// `module` without ".weight", e.g. "model.layers.0.self_attn.q_proj".
std::vector<ExpectedTensor> quantized_linear_tensors(const QuantConfig& q,
                                                     const std::string& module,
                                                     int64_t out_features, int64_t in_features);

// The tensor whose shape and dtype say what the Linear is: <m>.weight or <m>.qweight.
std::string stored_weight_name(const QuantConfig& q, const std::string& module);

// Packing and grouping need out % 8 == 0 (int4), in % 8 == 0 (GPTQ), in % group_size == 0
// (AWQ; GPTQ without desc_act). A failure names the field, its value and the Linear.
Status check_quant_fits(const QuantConfig& q, const std::string& module, int64_t out_features,
                        int64_t in_features, const std::string& source);

// Bytes of `store` by how they are stored, largest first: "awq int4" (qweight, qzeros, scales
// and g_idx of the quantized Linears), "fp8 e4m3", "gptq int4", and the dtype of the rest
// ("bf16", "f32", ...). For `tandem status`.
std::vector<std::pair<std::string, int64_t>> weight_bytes_by_format(const ModelConfig& config,
                                                                    const WeightStore& store);

// GPTQ scale/zero groups: ceil(in / group_size), or 1 for group_size -1.
int64_t gptq_groups(const QuantConfig& q, int64_t in_features);

}  // namespace tandem
