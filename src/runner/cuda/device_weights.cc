#include "runner/cuda/device_weights.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <future>
#include <variant>

#include "core/dtype.h"
#include "kernels/cuda_check.cuh"
#include "model/device_quant_layout.h"

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

  // Host bytes as they are (repacked quantized matrices).
  template <typename T>
  void upload_raw(const std::vector<T>& host, DeviceBuffer& dst) {
    const size_t bytes = host.size() * sizeof(T);
    dst = DeviceBuffer(bytes);
    const auto* src = reinterpret_cast<const std::byte*>(host.data());
    for (size_t first = 0; first < bytes; first += kStagingBytes) {
      const size_t count = std::min(kStagingBytes, bytes - first);
      std::memcpy(staging_.as<std::byte>(), src + first, count);
      TANDEM_CUDA_CHECK(cudaMemcpy(dst.as<std::byte>() + first, staging_.as<std::byte>(), count,
                                   cudaMemcpyHostToDevice));
      done_ += int64_t(count);
      report();
    }
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

// One Linear of a stacked group as the host holds it before upload.
struct Member {
  const TensorView* weight;
  const LinearQuant* quant;
};
using HostForm = std::variant<const TensorView*, Int4Layout, Fp8Layout>;

std::string module_of(const TensorView& weight) {
  const size_t dot = weight.name.rfind('.');
  return dot == std::string::npos ? weight.name : weight.name.substr(0, dot);
}

Result<HostForm> host_form(const Member& m) {
  switch (m.quant->format) {
    case QuantFormat::kNone:
      return HostForm(m.weight);
    case QuantFormat::kAwq:
    case QuantFormat::kGptq: {
      TANDEM_ASSIGN_OR_RETURN(Int4Layout l, repack_int4(*m.weight, *m.quant, module_of(*m.weight)));
      return HostForm(std::move(l));
    }
    case QuantFormat::kFp8: {
      TANDEM_ASSIGN_OR_RETURN(Fp8Layout l, repack_fp8(*m.weight, *m.quant, module_of(*m.weight)));
      return HostForm(std::move(l));
    }
  }
  return make_error(ErrorCode::kInternal, "unknown quantization format");
}

// Whether `below` joins the part `above` heads: same format and a matrix both fit in.
bool stacks(const HostForm& above, const Member& a, const HostForm& below, const Member& b) {
  if (above.index() != below.index() || a.quant->format != b.quant->format) return false;
  if (const auto* i = std::get_if<Int4Layout>(&above))
    return i->can_stack(std::get<Int4Layout>(below));
  if (const auto* f = std::get_if<Fp8Layout>(&above)) {
    return f->can_stack(std::get<Fp8Layout>(below)) &&
           a.quant->fp8_activations == b.quant->fp8_activations &&
           a.quant->activation_scale_ub == b.quant->activation_scale_ub;
  }
  return true;
}

// Repacks the members (in parallel: the int4 repacking walks every nibble) and uploads them as
// few parts as their forms allow.
Status upload_linear(Uploader& up, const std::vector<Member>& members, DeviceLinear& dst) {
  std::vector<std::future<Result<HostForm>>> pending;
  for (const Member& m : members)
    pending.push_back(std::async(std::launch::async, [m] { return host_form(m); }));
  std::vector<HostForm> forms;
  for (auto& f : pending) {
    Result<HostForm> r = f.get();
    if (!r.ok()) return r.error();
    forms.push_back(std::move(r).value());
  }
  dst = DeviceLinear{};
  // A float Linear's own shape says k (runner tests build LayerWeights without LinearQuant).
  const Member& first = members[0];
  dst.k = int32_t(first.quant->format == QuantFormat::kNone ? first.weight->shape[1]
                                                            : first.quant->in_features);
  size_t i = 0;
  while (i < members.size()) {
    size_t j = i + 1;
    std::vector<const TensorView*> floats{};
    if (const auto* t = std::get_if<const TensorView*>(&forms[i])) floats.push_back(*t);
    while (j < members.size() && stacks(forms[i], members[i], forms[j], members[j])) {
      if (const auto* t = std::get_if<const TensorView*>(&forms[j])) {
        floats.push_back(*t);
      } else if (auto* l = std::get_if<Int4Layout>(&forms[i])) {
        l->stack(std::get<Int4Layout>(forms[j]));
      } else {
        std::get<Fp8Layout>(forms[i]).stack(std::get<Fp8Layout>(forms[j]));
      }
      ++j;
    }
    DeviceLinearPart p;
    const LinearQuant& q = *members[i].quant;
    p.format = q.format;
    p.row0 = dst.n;
    if (!floats.empty()) {
      for (const TensorView* t : floats) p.rows += int32_t(t->shape[0]);
      TANDEM_TRY(up.upload(floats, p.weight, false));
    } else if (const auto* i4 = std::get_if<Int4Layout>(&forms[i])) {
      p.rows = int32_t(i4->n);
      p.group_size = int32_t(i4->group_size);
      up.upload_raw(i4->qweight, p.weight);
      up.upload_raw(i4->scales, p.scales);
      up.upload_raw(i4->zeros, p.zeros);
      if (!i4->perm.empty()) up.upload_raw(i4->perm, p.perm);
    } else {
      const Fp8Layout& l = std::get<Fp8Layout>(forms[i]);
      p.rows = int32_t(l.n);
      p.fp8_block = l.block;
      p.fp8_activations = q.fp8_activations;
      p.activation_scale_ub = float(q.activation_scale_ub);
      up.upload_raw(l.weight, p.weight);
      up.upload_raw(l.scale, p.scales);
      if (q.fp8_activations == Fp8Activations::kStaticTensor)
        up.upload_raw(std::vector<float>{l.input_scale}, p.input_scale);
    }
    dst.n += p.rows;
    dst.parts.push_back(std::move(p));
    i = j;
  }
  return Status::Ok();
}

// Bytes a matrix occupies as stored (the progress bar's total; the memory plan measures).
int64_t stored_bytes(const TensorView* t, const LinearQuant& q) {
  if (q.format == QuantFormat::kNone) return int64_t(elements(*t)) * 2;
  int64_t b = int64_t(t->nbytes);
  for (const TensorView* x : {q.scale, q.zeros, q.g_idx})
    b += x != nullptr ? int64_t(x->nbytes) : 0;
  return b;
}

void count_formats(DeviceWeights& d) {
  auto add = [&](const std::string& label, const DeviceBuffer& b) {
    if (b.bytes() == 0) return;
    for (auto& [name, bytes] : d.bytes_by_format) {
      if (name == label) {
        bytes += int64_t(b.bytes());
        return;
      }
    }
    d.bytes_by_format.emplace_back(label, int64_t(b.bytes()));
  };
  add("bf16", d.embed);
  add("bf16", d.lm_head_own);
  add("f32", d.final_norm);
  for (const DeviceLayer& l : d.layers) {
    for (const DeviceLinear* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      for (const DeviceLinearPart& p : lin->parts) {
        const std::string label = p.format == QuantFormat::kNone ? "bf16"
                                  : p.format == QuantFormat::kFp8
                                      ? "fp8 e4m3"
                                      : std::string(quant_format_name(p.format)) + " int4";
        for (const DeviceBuffer* b : {&p.weight, &p.scales, &p.zeros, &p.perm, &p.input_scale})
          add(label, *b);
      }
    }
    for (const DeviceBuffer* b : {&l.qkv_bias, &l.input_norm, &l.post_attn_norm}) add("f32", *b);
  }
  std::sort(d.bytes_by_format.begin(), d.bytes_by_format.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
}

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
    const LayerQuant& q = l.quant;
    for (auto [t, lq] : {std::pair{l.q_proj, &q.q_proj},
                         {l.k_proj, &q.k_proj},
                         {l.v_proj, &q.v_proj},
                         {l.o_proj, &q.o_proj},
                         {l.gate_proj, &q.gate_proj},
                         {l.up_proj, &q.up_proj},
                         {l.down_proj, &q.down_proj}})
      total += stored_bytes(t, *lq);
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
    const LayerQuant& q = l.quant;
    DeviceLayer& dl = d.layers[i];
    st = upload_linear(up, {{l.q_proj, &q.q_proj}, {l.k_proj, &q.k_proj}, {l.v_proj, &q.v_proj}},
                       dl.qkv);
    if (st.ok() && l.q_bias != nullptr) st = run({l.q_bias, l.k_bias, l.v_bias}, dl.qkv_bias, true);
    if (st.ok()) st = upload_linear(up, {{l.o_proj, &q.o_proj}}, dl.o);
    if (st.ok())
      st = upload_linear(up, {{l.gate_proj, &q.gate_proj}, {l.up_proj, &q.up_proj}}, dl.gate_up);
    if (st.ok()) st = upload_linear(up, {{l.down_proj, &q.down_proj}}, dl.down);
    if (st.ok()) st = run({l.input_norm}, dl.input_norm, true);
    if (st.ok()) st = run({l.post_attn_norm}, dl.post_attn_norm, true);
    if (!st.ok()) return st.error();
  }
  up.finish();
  count_formats(d);
  return d;
}

}  // namespace tandem
