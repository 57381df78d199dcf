// The Linear shapes of one Qwen2.5-7B layer as the CUDA runner stacks them (q|k|v, gate|up):
// what the per-format kernel benchmarks time.
#pragma once

#include <cstdint>

namespace tandem::bench {

struct LinearShape {
  const char* name;
  int32_t n, k;  // output and input features
};

constexpr LinearShape kQwen7bLinears[] = {
    {"qkv_proj", 4608, 3584},
    {"o_proj", 3584, 3584},
    {"gate_up_proj", 37888, 3584},
    {"down_proj", 3584, 18944},
};

}  // namespace tandem::bench
