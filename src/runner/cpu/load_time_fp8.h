// --quantization fp8 on the CPU runner: owned FP8 copies of a float checkpoint's decoder
// Linears, quantized as the GPU will quantize them (per output channel: scale = max|row| / 448,
// q = e4m3(w / scale); model/quant_pack.h), read back through the same dequantization as a
// published fp8 checkpoint. Activations are W8A8 dynamic per token (fp8_activations.h).
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "model/model_dir.h"
#include "runner/cpu/thread_pool.h"

namespace tandem {

struct Fp8WeightCopy {
  std::deque<TensorView> views;  // weight [out, in] F8_E4M3, weight_scale [out] F32
  std::vector<std::unique_ptr<std::byte[]>> data;  // what the views point at
  int64_t bytes = 0;
};

// Points `weights`' seven projections of every layer at FP8 copies owned by `copy`; `quant` is
// the load-time QuantConfig (load_time_quantization). Float weights only (checked by the caller).
void quantize_weights_fp8(const QuantConfig& quant, ThreadPool& pool, ModelWeights& weights,
                          Fp8WeightCopy& copy);

}  // namespace tandem
