// RoPE inverse frequencies [head_dim / 2], with llama3 scaling applied as transformers does
// (_compute_llama3_parameters); the kernel only multiplies by the position.
#pragma once

#include <vector>

#include "model/config.h"

namespace tandem {

std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace tandem
