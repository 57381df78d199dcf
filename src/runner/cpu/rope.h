// Rotary position embedding as transformers applies it to Qwen2 and Llama: rotate_half pairs
// element i with element i + head_dim/2 (not adjacent pairs), angle = position × inv_freq[i].
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace tandem {

// [head_dim / 2] fp32 inverse frequencies: 1 / theta^(2i / head_dim), then Llama 3's
// frequency-dependent scaling when the config asks for it (transformers'
// _compute_llama3_parameters: long wavelengths divided by factor, short ones kept, a smooth
// blend between).
std::vector<float> rope_inv_freq(const ModelConfig& config);

// Rotates `num_heads` heads of one token in place: x[num_heads, head_dim] at `position`.
void apply_rope(float* x, int64_t num_heads, int64_t head_dim, int64_t position,
                const std::vector<float>& inv_freq);

}  // namespace tandem
