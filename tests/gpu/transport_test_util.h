// Shared by the gpu and multi_gpu transport tests: device KV pools with seeded random bytes and
// a host mirror (the expectation), and a tiny-model engine run that collects greedy tokens.
#pragma once

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "kernels/cuda_check.cuh"
#include "transport/kv_transport.h"
#include "unit/engine/engine_test_util.h"

namespace tandem::gpu_test {

// [layers][2][pages][page_bytes] on one device; `host` mirrors what the device should hold.
struct DevicePool {
  DevicePool(int device, int32_t layers, int32_t pages, size_t page_bytes, uint32_t seed)
      : host(size_t(layers) * 2 * size_t(pages) * page_bytes) {
    std::mt19937 g(seed);
    for (auto& b : host) b = std::byte(uint8_t(g()));
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    TANDEM_CUDA_CHECK(cudaMalloc(&base, host.size()));
    TANDEM_CUDA_CHECK(cudaMemcpy(base, host.data(), host.size(), cudaMemcpyHostToDevice));
    view.device = device;
    view.page_bytes = page_bytes;
    view.num_pages = pages;
    for (int32_t l = 0; l < layers; ++l) {
      view.k.push_back(base + offset(l, false, 0));
      view.v.push_back(base + offset(l, true, 0));
    }
  }
  ~DevicePool() { cudaFree(base); }
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  size_t offset(int32_t layer, bool v, int32_t page) const {
    return ((size_t(layer) * 2 + (v ? 1 : 0)) * size_t(view.num_pages) + size_t(page)) *
           view.page_bytes;
  }
  // What `order` must do, applied to the host mirror of this (destination) pool.
  void expect(const ShipOrder& order, const DevicePool& src) {
    for (int32_t l = order.layer_begin; l < order.layer_end; ++l) {
      for (bool v : {false, true}) {
        for (const PageCopy& p : order.pages) {
          std::memcpy(host.data() + offset(l, v, p.dst), src.host.data() + src.offset(l, v, p.src),
                      view.page_bytes);
        }
      }
    }
  }
  std::vector<std::byte> device_bytes() const {
    std::vector<std::byte> out(host.size());
    TANDEM_CUDA_CHECK(cudaMemcpy(out.data(), base, out.size(), cudaMemcpyDeviceToHost));
    return out;
  }
  bool matches() const { return device_bytes() == host; }

  std::byte* base = nullptr;
  std::vector<std::byte> host;
  KvPoolView view;
};

// A random order: distinct destination pages, any source pages.
inline ShipOrder random_order(const DevicePool& src, const DevicePool& dst, int32_t num_pairs,
                              int32_t layer_begin, int32_t layer_end, std::mt19937& g) {
  std::vector<int32_t> dsts(size_t(dst.view.num_pages));
  for (size_t i = 0; i < dsts.size(); ++i) dsts[i] = int32_t(i);
  std::shuffle(dsts.begin(), dsts.end(), g);
  ShipOrder o;
  o.src = &src.view;
  o.dst = &dst.view;
  o.layer_begin = layer_begin;
  o.layer_end = layer_end;
  for (int32_t i = 0; i < num_pairs; ++i) {
    o.pages.push_back({int32_t(g() % uint32_t(src.view.num_pages)), dsts[size_t(i)]});
  }
  return o;
}

// The engine tests' helpers: tiny models, the token collector, greedy inputs.
using testing::Collector;
using testing::greedy;
using testing::prompt_of;

inline std::string tiny_model_dir() {
  return testing::make_tiny_model("tandem-transport-test-tiny-qwen-11", "tiny-qwen", 11);
}
// Same vocabulary, other weights: a draft that mostly disagrees with tiny_model_dir().
inline std::string tiny_draft_dir() {
  return testing::make_tiny_model("tandem-transport-test-tiny-qwen-29", "tiny-qwen", 29);
}

inline EngineOptions engine_options(const std::string& prefill, const std::string& decode,
                                    const std::string& transport, int32_t page_size,
                                    int32_t chunk) {
  EngineOptions o;
  o.model_dir = tiny_model_dir();
  o.prefill_device = prefill;
  o.decode_device = decode;
  o.kv_transport = transport;
  o.page_size = page_size;
  o.prefill_chunk = chunk;
  o.kv_pages = 512;
  return o;
}

// Greedy tokens per request for `lens` prompts; concurrent: all submitted to the started
// engine's threads at once, else one at a time through run_until_idle. Callers compare runs of
// one chunk size, so a request's prefill runs the same shapes (the same kernels, the same
// rounding) in every configuration; the tiny model's greedy tokens also held across CPU and
// CUDA (benchmarks/results/2026-12-01-engine-h200.json), so batch composition under
// concurrency is not expected to flip them.
inline std::map<uint64_t, std::vector<int32_t>> run_greedy(const EngineOptions& o,
                                                           const std::vector<int>& lens,
                                                           int max_tokens, bool concurrent) {
  auto created = Engine::create(o);
  REQUIRE_MESSAGE(created.ok(), created.error().to_string());
  auto engine = std::move(created).value();
  Collector col;
  if (concurrent) engine->start();
  for (size_t i = 0; i < lens.size(); ++i) {
    REQUIRE(engine->submit(i, greedy(prompt_of(lens[i], int(i)), max_tokens), &col).ok());
    if (!concurrent) engine->run_until_idle();
  }
  if (concurrent) engine->stop(/*drain_ms=*/120000);
  std::map<uint64_t, std::vector<int32_t>> out;
  for (size_t i = 0; i < lens.size(); ++i) {
    CAPTURE(i);
    REQUIRE(col.results[i].finish);
    CHECK(col.results[i].finish->reason == FinishReason::kLength);
    out[i] = col.results[i].ids;
  }
  for (const PoolStatus& p : engine->status().pools) CHECK_MESSAGE(p.used_pages == 0, p.name);
  return out;
}

}  // namespace tandem::gpu_test
