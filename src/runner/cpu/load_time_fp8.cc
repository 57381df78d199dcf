#include "runner/cpu/load_time_fp8.h"

#include <vector>

#include "model/quant_pack.h"
#include "runner/cpu/cpu_ops.h"

namespace tandem {

namespace {

// A new owned tensor; returns its writable bytes (the view is copy.views.back()).
std::byte* add_view(Fp8WeightCopy& copy, const std::string& name, DType dtype,
                    std::vector<int64_t> shape, size_t nbytes) {
  copy.data.push_back(std::make_unique_for_overwrite<std::byte[]>(nbytes));
  TensorView& t = copy.views.emplace_back();
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = copy.data.back().get();
  t.nbytes = nbytes;
  t.file = "(quantized at load)";
  copy.bytes += int64_t(nbytes);
  return copy.data.back().get();
}

void quantize_linear(const QuantConfig& quant, ThreadPool& pool, const TensorView*& weight,
                     LinearQuant& lq, Fp8WeightCopy& copy) {
  // The float weight's own shape (weights built in memory, as benchmarks do, carry no
  // LinearQuant sizes).
  const int64_t out = weight->shape[0];
  const int64_t in = weight->shape[1];
  lq.out_features = out;
  lq.in_features = in;
  const std::string module = weight->name.substr(0, weight->name.rfind('.'));
  auto* q_bytes = reinterpret_cast<uint8_t*>(
      add_view(copy, module + ".weight", DType::kF8E4M3, {out, in}, size_t(out * in)));
  const TensorView& q = copy.views.back();
  auto* scales = reinterpret_cast<float*>(
      add_view(copy, module + ".weight_scale", DType::kF32, {out}, size_t(out) * sizeof(float)));
  const TensorView& s = copy.views.back();
  const TensorView& w = *weight;
  pool.parallel_for(out, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(in));  // [in] one widened weight row
    for (int64_t o = begin; o < end; ++o) {
      weight_row_to_f32(w, o, row.data());
      quantize_fp8(row.data(), 1, in, Fp8ScaleGranularity::kChannel, 0, 0, q_bytes + o * in,
                   scales + o);
    }
  });
  weight = &q;
  lq.format = QuantFormat::kFp8;
  lq.fp8_scale = Fp8ScaleGranularity::kChannel;
  lq.fp8_activations = quant.fp8_activations;
  lq.activation_scale_ub = quant.activation_scale_ub;
  lq.scale = &s;
}

}  // namespace

void quantize_weights_fp8(const QuantConfig& quant, ThreadPool& pool, ModelWeights& weights,
                          Fp8WeightCopy& copy) {
  for (LayerWeights& l : weights.layers) {
    LayerQuant& lq = l.quant;
    quantize_linear(quant, pool, l.q_proj, lq.q_proj, copy);
    quantize_linear(quant, pool, l.k_proj, lq.k_proj, copy);
    quantize_linear(quant, pool, l.v_proj, lq.v_proj, copy);
    quantize_linear(quant, pool, l.o_proj, lq.o_proj, copy);
    quantize_linear(quant, pool, l.gate_proj, lq.gate_proj, copy);
    quantize_linear(quant, pool, l.up_proj, lq.up_proj, copy);
    quantize_linear(quant, pool, l.down_proj, lq.down_proj, copy);
  }
}

}  // namespace tandem
