// FP8 half of model/device_quant_layout.h: the checkpoint's e4m3 bytes as they are, and its
// scales widened to fp32 in the two shapes the kernels read (kernels/fp8_linear.cuh).
#include <algorithm>
#include <cstring>

#include "model/dequant.h"
#include "model/device_quant_layout.h"

namespace tandem {

namespace {

constexpr int64_t kBlock = 128;  // kernels::kFp8Block; the only block shape the kernels tile

Error unsupported(const std::string& module, const std::string& what) {
  return make_error(ErrorCode::kUnsupported, module + ": " + what);
}

}  // namespace

bool Fp8Layout::can_stack(const Fp8Layout& below) const {
  if (k != below.k || block != below.block || input_scale != below.input_scale) return false;
  // Block scales are stacked as rows of blocks: this matrix must end on a block boundary, or
  // its last block row would be shared with `below`'s first rows under two different scales.
  return !block || n % kBlock == 0;
}

void Fp8Layout::stack(const Fp8Layout& below) {
  weight.insert(weight.end(), below.weight.begin(), below.weight.end());
  scale.insert(scale.end(), below.scale.begin(), below.scale.end());
  n += below.n;
}

Result<Fp8Layout> repack_fp8(const TensorView& weight, const LinearQuant& q,
                             const std::string& module) {
  if (q.format != QuantFormat::kFp8 || q.scale == nullptr) {
    return make_error(ErrorCode::kInternal, module + ": repack_fp8 on a Linear that is not fp8");
  }
  if (q.fp8_scale == Fp8ScaleGranularity::kBlock &&
      (q.block_out != kBlock || q.block_in != kBlock)) {
    return unsupported(
        module, "quantization_config.weight_block_size = [" + std::to_string(q.block_out) + ", " +
                    std::to_string(q.block_in) +
                    "] is not supported by the CUDA kernels (supported: [128, 128])");
  }
  // The kernels read 16 e4m3 bytes per load and cuBLASLt's FP8 path needs 16-byte rows.
  if (q.in_features % 16 != 0) {
    return unsupported(module, "in_features = " + std::to_string(q.in_features) +
                                   " is not supported by the CUDA fp8 kernels (a multiple of 16)");
  }
  Fp8Layout l;
  l.n = q.out_features;
  l.k = q.in_features;
  l.block = q.fp8_scale == Fp8ScaleGranularity::kBlock;
  l.weight.resize(size_t(l.n * l.k));
  std::memcpy(l.weight.data(), weight.data, l.weight.size());
  switch (q.fp8_scale) {
    case Fp8ScaleGranularity::kTensor:
      l.scale.assign(size_t(l.n), float_element(*q.scale, 0));
      break;
    case Fp8ScaleGranularity::kChannel:
      l.scale.resize(size_t(l.n));
      for (int64_t r = 0; r < l.n; ++r) l.scale[size_t(r)] = float_element(*q.scale, r);
      break;
    case Fp8ScaleGranularity::kBlock: {
      const int64_t blocks = ((l.n + kBlock - 1) / kBlock) * ((l.k + kBlock - 1) / kBlock);
      l.scale.resize(size_t(blocks));
      for (int64_t b = 0; b < blocks; ++b) l.scale[size_t(b)] = float_element(*q.scale, b);
      break;
    }
  }
  if (q.fp8_activations == Fp8Activations::kStaticTensor) {
    if (q.input_scale == nullptr) {
      return make_error(ErrorCode::kInvalidModel,
                        module + ": static fp8 activations but no " + module + ".input_scale");
    }
    l.input_scale = float_element(*q.input_scale, 0);
  }
  return l;
}

}  // namespace tandem
