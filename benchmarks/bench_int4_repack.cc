// Host time of the int4 repack at model load (model/device_quant_layout.h): every AWQ Linear of
// Qwen2.5-7B's 28 layers, with q/k/v and gate/up repacked concurrently as the CUDA runner's
// loader does (runner/cuda/device_weights.cc). Random nibbles and fp16 scales; one JSON line.
//   bench_int4_repack [--layers 28]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "model/device_quant_layout.h"
#include "model/quant_linear.h"
#include "model/safetensors.h"

using namespace tandem;

namespace {

// One AWQ Linear's tensors (qweight [k, n / 8], qzeros [groups, n / 8], scales [groups, n]).
struct AwqLinear {
  std::vector<uint32_t> qweight, qzeros;
  std::vector<uint16_t> scales;
  TensorView qweight_view, qzeros_view, scales_view;
  LinearQuant quant;

  AwqLinear(int64_t n, int64_t k, std::mt19937& rng) {
    const int64_t groups = k / 128;
    qweight.resize(size_t(k * n / 8));
    qzeros.resize(size_t(groups * n / 8));
    scales.resize(size_t(groups * n));
    for (uint32_t& w : qweight) w = rng();
    for (uint32_t& w : qzeros) w = rng();
    std::uniform_real_distribution<float> scale(0.001f, 0.05f);
    for (uint16_t& s : scales) s = f32_to_f16(scale(rng));
    view(qweight_view, "qweight", DType::kI32, {k, n / 8}, qweight.data(), qweight.size() * 4);
    view(qzeros_view, "qzeros", DType::kI32, {groups, n / 8}, qzeros.data(), qzeros.size() * 4);
    view(scales_view, "scales", DType::kF16, {groups, n}, scales.data(), scales.size() * 2);
    quant.format = QuantFormat::kAwq;
    quant.out_features = n;
    quant.in_features = k;
    quant.group_size = 128;
    quant.scale = &scales_view;
    quant.zeros = &qzeros_view;
  }
  AwqLinear(const AwqLinear&) = delete;
  AwqLinear& operator=(const AwqLinear&) = delete;

  static void view(TensorView& v, const char* name, DType dtype, std::vector<int64_t> shape,
                   const void* data, size_t bytes) {
    v.name = name;
    v.dtype = dtype;
    v.shape = std::move(shape);
    v.data = static_cast<const std::byte*>(data);
    v.nbytes = bytes;
    v.file = "(bench)";
  }

  bool repack() const { return repack_int4(qweight_view, quant, "bench").ok(); }
};

}  // namespace

int main(int argc, char** argv) {
  int layers = 28;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--layers") == 0) layers = std::atoi(argv[i + 1]);
  }
  std::mt19937 rng(1);
  // Qwen2.5-7B: hidden 3,584, 4 KV heads of 128, intermediate 18,944.
  const AwqLinear q(3584, 3584, rng), kv(512, 3584, rng), o(3584, 3584, rng);
  const AwqLinear gate_up(18944, 3584, rng), down(3584, 18944, rng);
  auto async = [](const AwqLinear& l) {
    return std::async(std::launch::async, [&l] { return l.repack(); });
  };
  bool ok = true;
  const auto t0 = std::chrono::steady_clock::now();
  for (int layer = 0; layer < layers; ++layer) {
    auto fq = async(q), fk = async(kv), fv = async(kv);
    ok = fq.get() && fk.get() && fv.get() && ok;
    ok = o.repack() && ok;
    auto fg = async(gate_up), fu = async(gate_up);
    ok = fg.get() && fu.get() && ok;
    ok = down.repack() && ok;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "{\"bench\":\"int4_repack\",\"model\":\"qwen2.5-7b awq\",\"layers\":%d,\"threads\":%u,"
      "\"seconds\":%.3f,\"ok\":%s}\n",
      layers, std::thread::hardware_concurrency(), seconds, ok ? "true" : "false");
  return ok ? 0 : 1;
}
