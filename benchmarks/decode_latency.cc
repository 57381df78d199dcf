// Latency of the CUDA runner on real model shapes without a model directory: weights are seeded
// random bf16 (every layer has its own device copy, so each step reads all weight bytes), built
// from one host pattern per tensor shape. Speed only; correctness is the gpu suite's job.
//
//   bench_decode_latency --preset qwen2.5-7b --input-len 128 --output-len 128 --batch-size 1
//                        (presets: qwen2.5-7b, llama-3.1-8b, qwen2.5-0.5b, llama-3.2-1b)
//                        [--graphs 0] [--sampling greedy|qwen|llama] [--device-timing 1]
//                        [--quantization fp8] [--query-len N]
// prints one JSON object (benchmarks/latency.h): TTFT, TPOT, tok/s and MBU.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda_check.cuh"
#include "latency.h"
#include "model/model_dir.h"
#include "runner/cuda/cuda_runner.h"

using namespace tandem;

namespace {

ModelConfig shape(int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv,
                  int64_t vocab, bool bias, bool tied) {
  ModelConfig c;
  c.arch = bias ? Arch::kQwen2 : Arch::kLlama;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv;
  c.head_dim = hidden / heads;
  c.vocab_size = vocab;
  c.attention_bias = bias;
  c.tie_word_embeddings = tied;
  c.rope_theta = bias ? 1000000.0 : 500000.0;
  return c;
}

struct HostWeights {
  std::vector<std::vector<uint16_t>> blobs;
  std::vector<std::unique_ptr<TensorView>> views;
  ModelWeights w;
  const TensorView* view(std::vector<int64_t> s, float scale, float offset = 0.0f) {
    size_t n = 1;
    for (auto d : s) n *= size_t(d);
    // xorshift, not <random>: billions of values must be made in a second or two.
    std::vector<uint16_t> data(n);
    uint64_t x = 0x9e3779b97f4a7c15ull * (blobs.size() + 1);
    for (auto& v : data) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const float u = float(x >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      v = f32_to_bf16(offset + scale * (2.0f * u - 1.0f));
    }
    blobs.push_back(std::move(data));
    auto v = std::make_unique<TensorView>();
    v->dtype = DType::kBF16;
    v->shape = s;
    v->data = reinterpret_cast<const std::byte*>(blobs.back().data());
    v->nbytes = n * 2;
    v->name = "bench";
    views.push_back(std::move(v));
    return views.back().get();
  }
};

// One host copy per tensor role; all layers point at it (the device gets one copy per layer).
HostWeights make_weights(const ModelConfig& c) {
  HostWeights h;
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  h.w.embed_tokens = h.view({c.vocab_size, H}, 0.05f);
  h.w.lm_head = c.tie_word_embeddings ? h.w.embed_tokens : h.view({c.vocab_size, H}, 0.05f);
  h.w.final_norm = h.view({H}, 0.1f, 1.0f);
  LayerWeights l{};
  l.input_norm = h.view({H}, 0.1f, 1.0f);
  l.post_attn_norm = h.view({H}, 0.1f, 1.0f);
  l.q_proj = h.view({c.num_heads * D, H}, 0.02f);
  l.k_proj = h.view({c.num_kv_heads * D, H}, 0.02f);
  l.v_proj = h.view({c.num_kv_heads * D, H}, 0.02f);
  if (c.attention_bias) {
    l.q_bias = h.view({c.num_heads * D}, 0.1f);
    l.k_bias = h.view({c.num_kv_heads * D}, 0.1f);
    l.v_bias = h.view({c.num_kv_heads * D}, 0.1f);
  }
  l.o_proj = h.view({H, c.num_heads * D}, 0.02f);
  l.gate_proj = h.view({I, H}, 0.02f);
  l.up_proj = h.view({I, H}, 0.02f);
  l.down_proj = h.view({H, I}, 0.02f);
  h.w.layers.assign(size_t(c.num_layers), l);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "qwen2.5-7b";
  int input_len = 128, output_len = 128, batch = 1;
  int query_len = 1;  // tokens a sequence per step: a verify pass of k = query_len - 1
  int page = 16;      // KV page size in tokens (vLLM's --block-size)
  bool graphs = true;
  bool device_timing = false;   // CUDA events around every forward (what --trace turns on)
  bool async_decode = true;     // one-token steps as the engine runs them (latency.h)
  bool profile_decode = false;  // cudaProfilerStart before decoding (ncu --profile-from-start off)
  std::string quantization;     // "fp8": the random bf16 weights quantized at load
  std::string sampling = "greedy";  // greedy | qwen | llama: the models' generation_config
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--preset")
      preset = v;
    else if (k == "--input-len")
      input_len = std::stoi(v);
    else if (k == "--output-len")
      output_len = std::stoi(v);
    else if (k == "--batch-size")
      batch = std::stoi(v);
    else if (k == "--graphs")
      graphs = v == "1";
    else if (k == "--sampling")
      sampling = v;
    else if (k == "--profile-decode")
      profile_decode = v == "1";
    else if (k == "--device-timing")
      device_timing = v == "1";
    else if (k == "--async-decode")
      async_decode = v == "1";
    else if (k == "--quantization")
      quantization = v;
    else if (k == "--query-len")
      query_len = std::stoi(v);
    else if (k == "--page-size")
      page = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  ModelConfig c;
  if (preset == "qwen2.5-7b")
    c = shape(3584, 18944, 28, 28, 4, 152064, true, false);
  else if (preset == "llama-3.1-8b")
    c = shape(4096, 14336, 32, 32, 8, 128256, false, false);
  else if (preset == "qwen2.5-0.5b")
    c = shape(896, 4864, 24, 14, 2, 151936, true, true);
  else if (preset == "llama-3.2-1b")  // the 8B's draft (its llama3 RoPE scaling costs nothing here)
    c = shape(2048, 8192, 16, 32, 8, 128256, false, true);
  else {
    std::fprintf(stderr, "unknown preset %s\n", preset.c_str());
    return 2;
  }
  if (page < 1) {
    std::fprintf(stderr, "--page-size must be at least 1\n");
    return 2;
  }
  HostWeights hw = make_weights(c);
  bench::LatencyOptions lo;
  lo.input_len = input_len;
  lo.output_len = output_len;
  lo.batch_size = batch;
  lo.query_len = query_len;
  lo.async_decode = async_decode;
  const int pages_per_seq = bench::latency_pages_per_seq(lo, page);
  RunnerOptions opts;
  opts.device = "cuda:0";
  opts.page_size = page;
  opts.num_pages = pages_per_seq * batch + 1;
  opts.max_batch_tokens = std::max(input_len, batch * query_len);
  opts.max_seqs = std::max(batch, 1);
  opts.max_logit_rows = batch * query_len;
  opts.device_timing = device_timing;
  opts.quantization = quantization;
  auto created = CudaRunner::create(c, hw.w, opts);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.error().to_string().c_str());
    return 1;
  }
  CudaRunner& r = **created;
  r.set_use_graphs(graphs);
  int64_t weight_bytes = r.memory_plan().weights_bytes;
  // Untied: the embedding table is gathered, not read. Tied: it is read whole as lm_head.
  if (!c.tie_word_embeddings) weight_bytes -= c.vocab_size * c.hidden_size * 2;
  if (sampling == "qwen") {  // Qwen2.5's generation_config.json
    lo.decode_sampling.temperature = 0.7f;
    lo.decode_sampling.top_k = 20;
    lo.decode_sampling.top_p = 0.8f;
    lo.decode_sampling.repetition_penalty = 1.05f;
  } else if (sampling == "llama") {  // Llama 3.1's
    lo.decode_sampling.temperature = 0.6f;
    lo.decode_sampling.top_p = 0.9f;
  } else if (sampling != "greedy") {
    std::fprintf(stderr, "--sampling must be greedy, qwen or llama\n");
    return 2;
  }
  if (profile_decode) lo.before_decode = [] { TANDEM_CUDA_CHECK(cudaProfilerStart()); };
  auto res = bench::run_latency(r, lo, weight_bytes);
  if (!res.ok()) {
    std::fprintf(stderr, "%s\n", res.error().to_string().c_str());
    return 1;
  }
  const std::string label =
      preset + (quantization.empty() ? "" : " " + quantization) + (graphs ? "" : " (no graphs)") +
      (device_timing ? " (device timing)" : "") +
      (async_decode || query_len > 1 ? "" : " (synchronous steps)") +
      (sampling == "greedy" ? "" : ", " + sampling + " sampling") +
      (query_len > 1 ? ", " + std::to_string(query_len) + " tokens a step" : "");
  std::printf("%s\n", bench::to_json(lo, *res, label).c_str());
  return 0;
}
