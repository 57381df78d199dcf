#include "runner/cuda/device_weights.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cuda_check.cuh"

namespace tandem {
namespace {

constexpr size_t kStagingBytes = 64u << 20;

int64_t elements(const TensorView& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

// Host-side element conversion of `count` elements starting at element `first`.
void convert(const TensorView& t, int64_t first, int64_t count, bool to_f32, std::byte* dst) {
  for (int64_t i = 0; i < count; ++i) {
    float v = 0.0f;
    const std::byte* src = t.data + (first + i) * int64_t(dtype_size(t.dtype));
    uint16_t h = 0;
    switch (t.dtype) {
      case DType::kF32:
        std::memcpy(&v, src, 4);
        break;
      case DType::kF16:
        std::memcpy(&h, src, 2);
        v = f16_to_f32(h);
        break;
      default:
        std::memcpy(&h, src, 2);
        v = bf16_to_f32(h);
        break;
    }
    if (to_f32) {
      std::memcpy(dst + i * 4, &v, 4);
    } else {
      const uint16_t b = f32_to_bf16(v);
      std::memcpy(dst + i * 2, &b, 2);
    }
  }
}

class Uploader {
 public:
  Uploader(int64_t total, bool progress)
      : staging_(kStagingBytes), total_(total), progress_(progress) {}

  // Copies tensors back to back into `dst` (bf16 or fp32 elements).
  Status upload(const std::vector<const TensorView*>& parts, DeviceBuffer& dst, bool to_f32) {
    const size_t esize = to_f32 ? 4 : 2;
    int64_t numel = 0;
    for (const TensorView* t : parts) numel += elements(*t);
    dst = DeviceBuffer(size_t(numel) * esize);
    std::byte* out = dst.as<std::byte>();
    for (const TensorView* t : parts) {
      if (t->dtype != DType::kBF16 && t->dtype != DType::kF16 && t->dtype != DType::kF32) {
        return make_error(ErrorCode::kUnsupported, "tensor " + t->name + " in " + t->file +
                                                       " has dtype " +
                                                       std::string(dtype_name(t->dtype)) +
                                                       "; the CUDA runner loads bf16/fp16/fp32");
      }
      const bool raw = !to_f32 && t->dtype == DType::kBF16;
      const int64_t per_chunk = int64_t(kStagingBytes / esize);
      for (int64_t first = 0; first < elements(*t); first += per_chunk) {
        const int64_t count = std::min(per_chunk, elements(*t) - first);
        if (raw) {
          std::memcpy(staging_.as<std::byte>(), t->data + first * 2, size_t(count) * 2);
        } else {
          convert(*t, first, count, to_f32, staging_.as<std::byte>());
        }
        TANDEM_CUDA_CHECK(cudaMemcpy(out, staging_.as<std::byte>(), size_t(count) * esize,
                                     cudaMemcpyHostToDevice));
        out += count * int64_t(esize);
        done_ += count * int64_t(esize);
        report();
      }
    }
    return Status::Ok();
  }

  void finish() {
    if (progress_) std::fprintf(stderr, "\n");
  }

 private:
  void report() {
    if (!progress_ || total_ <= 0) return;
    const int pct = int(100 * done_ / total_);
    if (pct == last_pct_) return;
    last_pct_ = pct;
    const int bar = pct / 5;
    std::fprintf(stderr, "\rloading weights [%.*s%*s] %3d%% (%.2f GB)", bar, "####################",
                 20 - bar, "", pct, double(done_) / 1e9);
  }

  PinnedBuffer staging_;
  int64_t total_;
  int64_t done_ = 0;
  int last_pct_ = -1;
  bool progress_;
};

}  // namespace

Result<DeviceWeights> upload_weights(const ModelConfig& config, const ModelWeights& w,
                                     bool progress) {
  int64_t total = 0;
  auto add = [&](const TensorView* t, size_t esize) {
    if (t != nullptr) total += elements(*t) * int64_t(esize);
  };
  add(w.embed_tokens, 2);
  if (w.lm_head != w.embed_tokens) add(w.lm_head, 2);
  for (const LayerWeights& l : w.layers) {
    for (const TensorView* t :
         {l.q_proj, l.k_proj, l.v_proj, l.o_proj, l.gate_proj, l.up_proj, l.down_proj})
      add(t, 2);
    for (const TensorView* t : {l.q_bias, l.k_bias, l.v_bias, l.input_norm, l.post_attn_norm})
      add(t, 4);
  }
  Uploader up(total, progress);
  DeviceWeights d;
  auto run = [&](std::vector<const TensorView*> parts, DeviceBuffer& dst, bool f32) {
    return up.upload(parts, dst, f32);
  };
  Status st = run({w.embed_tokens}, d.embed, false);
  if (st.ok() && w.lm_head != w.embed_tokens) st = run({w.lm_head}, d.lm_head_own, false);
  if (st.ok()) st = run({w.final_norm}, d.final_norm, true);
  if (!st.ok()) return st.error();
  d.layers.resize(size_t(config.num_layers));
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    DeviceLayer& dl = d.layers[i];
    st = run({l.q_proj, l.k_proj, l.v_proj}, dl.qkv, false);
    if (st.ok() && l.q_bias != nullptr) st = run({l.q_bias, l.k_bias, l.v_bias}, dl.qkv_bias, true);
    if (st.ok()) st = run({l.o_proj}, dl.o, false);
    if (st.ok()) st = run({l.gate_proj, l.up_proj}, dl.gate_up, false);
    if (st.ok()) st = run({l.down_proj}, dl.down, false);
    if (st.ok()) st = run({l.input_norm}, dl.input_norm, true);
    if (st.ok()) st = run({l.post_attn_norm}, dl.post_attn_norm, true);
    if (!st.ok()) return st.error();
  }
  up.finish();
  d.bytes = total;
  return d;
}

}  // namespace tandem
