#include "model/quant_linear.h"

#include "model/quant_tensors.h"

namespace tandem {

namespace {

Error bad(const TensorView& t, const std::string& what) {
  return make_error(ErrorCode::kInvalidModel, t.file + ": tensor '" + t.name + "': " + what);
}

Status check_g_idx(const QuantConfig& q, const TensorView& g_idx, int64_t in_features) {
  const int64_t groups = gptq_groups(q, in_features);
  for (int64_t i = 0; i < in_features; ++i) {
    const int32_t g = int32_t(load_u32(g_idx.data, i));
    if (g < 0 || g >= groups) {
      return bad(g_idx, "entry " + std::to_string(i) + " is group " + std::to_string(g) +
                            ", outside [0, " + std::to_string(groups) + ")");
    }
    const int64_t in_order = q.group_size == -1 ? 0 : i / q.group_size;
    if (!q.desc_act && g != in_order) {
      return bad(g_idx, "entry " + std::to_string(i) + " is group " + std::to_string(g) +
                            " but quantization_config.desc_act is false (groups in order, " +
                            std::to_string(in_order) + " expected)");
    }
  }
  return Status::Ok();
}

// sym: GPTQ's symmetric grid centres every group on 8; kernels for sym checkpoints (marlin)
// do not read qzeros at all, so a checkpoint that says sym must mean it.
Status check_sym_zeros(const QuantConfig& q, const TensorView& zeros) {
  for (int64_t i = 0; i < zeros.numel(); ++i) {
    const uint32_t packed = load_u32(zeros.data, i);
    for (int k = 0; k < 8; ++k) {
      const int32_t z = int32_t((packed >> (4 * k)) & 15u) + q.zero_offset;
      if (z != 8) {
        return bad(zeros, "zero point " + std::to_string(z) +
                              " in a checkpoint with quantization_config.sym = true (every zero "
                              "point is 8)");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<LinearQuant> resolve_linear_quant(const QuantConfig& q, const WeightStore& store,
                                         const std::string& module, int64_t out_features,
                                         int64_t in_features) {
  LinearQuant l;
  l.format = q.format;
  l.out_features = out_features;
  l.in_features = in_features;
  l.fp8_scale = q.fp8_scale;
  l.block_out = q.block_out;
  l.block_in = q.block_in;
  l.fp8_activations = q.fp8_activations;
  l.activation_scale_ub = q.activation_scale_ub;
  l.group_size = q.group_size;
  l.zero_offset = q.zero_offset;
  switch (q.format) {
    case QuantFormat::kNone:
      break;
    case QuantFormat::kFp8:
      l.scale =
          store.find(module + (q.fp8_scale == Fp8ScaleGranularity::kBlock ? ".weight_scale_inv"
                                                                          : ".weight_scale"));
      l.input_scale = store.find(module + ".input_scale");
      break;
    case QuantFormat::kAwq:
    case QuantFormat::kGptq:
      l.scale = store.find(module + ".scales");
      l.zeros = store.find(module + ".qzeros");
      if (q.format == QuantFormat::kGptq) {
        l.g_idx = store.find(module + ".g_idx");
        if (l.g_idx) TANDEM_TRY(check_g_idx(q, *l.g_idx, in_features));
        // Groups in order need no table: kernels and the CPU compute i / group_size.
        if (!q.desc_act) l.g_idx = nullptr;
        if (q.sym) TANDEM_TRY(check_sym_zeros(q, *l.zeros));
      }
      break;
  }
  return l;
}

}  // namespace tandem
