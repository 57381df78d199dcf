// KV ship bandwidth per backend on real model KV shapes, without a model: device pools of the
// Qwen2.5-7B and Llama-3.1-8B layouts (bf16, pages of 16) holding a 2,048-token prompt.
//
//   kv_ship_bench [--src 0] [--dst 1] [--reps 20] [--out FILE.json]
//
// Per (shape, backend): one whole-prompt ship timed alone (median, host clock from ship() to
// the ticket's event), back-to-back ships (pipelined bandwidth), and the exposed ship time of a
// chunked prefill: 4 chunks of 512 tokens, each "computed" by an 8.75 ms stall on the writer
// stream (Qwen2.5-7B's 35 ms prefill floor / 4), each chunk shipped as soon as it is enqueued;
// exposed = from the last chunk's compute ending (host sync, as sample() does) to all KV landed.
// The stall is a host function, so the copies do not compete with a real forward for HBM.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda_check.cuh"
#include "transport/gpu/gpu_transports.h"

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

struct Shape {
  const char* name;
  int32_t layers, kv_heads, head_dim;
};

constexpr int32_t kPageSize = 16;
constexpr int32_t kTokens = 2048;
constexpr int32_t kChunk = 512;
constexpr double kChunkComputeMs = 8.75;

struct Pool {
  Pool(int device, const Shape& s, int32_t pages) {
    view.device = device;
    view.page_bytes = size_t(kPageSize) * size_t(s.kv_heads) * size_t(s.head_dim) * 2;
    view.num_pages = pages;
    bytes = size_t(s.layers) * 2 * size_t(pages) * view.page_bytes;
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    TANDEM_CUDA_CHECK(cudaMalloc(&base, bytes));
    TANDEM_CUDA_CHECK(cudaMemset(base, 0x5a, bytes));
    for (int32_t l = 0; l < s.layers; ++l) {
      view.k.push_back(base + (size_t(2 * l) * size_t(pages)) * view.page_bytes);
      view.v.push_back(base + (size_t(2 * l + 1) * size_t(pages)) * view.page_bytes);
    }
  }
  ~Pool() { cudaFree(base); }
  std::byte* base = nullptr;
  size_t bytes = 0;
  KvPoolView view;
};

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

ShipOrder order_of(const Pool& src, const Pool& dst, int32_t page_begin, int32_t page_end) {
  ShipOrder o;
  o.src = &src.view;
  o.dst = &dst.view;
  o.layer_begin = 0;
  o.layer_end = src.view.num_layers();
  // Destination pages reversed: not the identity map, as after real allocation.
  for (int32_t p = page_begin; p < page_end; ++p)
    o.pages.push_back({p, dst.view.num_pages - 1 - p});
  return o;
}

void wait_done(KvTransport& t, KvTransport::Ticket ticket) {
  if (t.wait(ticket, std::chrono::seconds(30)) != ShipState::kDone) {
    std::fprintf(stderr, "ship failed: %s\n", t.take_error(ticket).to_string().c_str());
    std::exit(1);
  }
  t.release(ticket);
}

nlohmann::json bench(const char* backend, GpuTransport& t, Pool& src, Pool& dst, int reps) {
  const int32_t pages = kTokens / kPageSize;
  const ShipOrder all = order_of(src, dst, 0, pages);
  const double gb = double(all.bytes()) / 1e9;
  for (int i = 0; i < 3; ++i) wait_done(t, *t.ship(all));  // warm-up
  std::vector<double> single;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    wait_done(t, *t.ship(all));
    single.push_back(ms_since(t0));
  }
  std::vector<KvTransport::Ticket> tickets;
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) tickets.push_back(*t.ship(all));
  for (auto ticket : tickets) wait_done(t, ticket);
  const double pipelined_ms = ms_since(t0) / reps;

  cudaStream_t writer;
  TANDEM_CUDA_CHECK(cudaSetDevice(src.view.device));
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&writer, cudaStreamNonBlocking));
  src.view.writer_stream = writer;
  std::vector<double> exposed;
  for (int i = 0; i < std::max(3, reps / 4); ++i) {
    tickets.clear();
    for (int32_t c = 0; c < kTokens; c += kChunk) {
      TANDEM_CUDA_CHECK(cudaLaunchHostFunc(
          writer,
          [](void*) {
            std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(kChunkComputeMs));
          },
          nullptr));
      tickets.push_back(*t.ship(order_of(src, dst, c / kPageSize, (c + kChunk) / kPageSize)));
    }
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(writer));
    const auto end_compute = Clock::now();
    for (auto ticket : tickets) wait_done(t, ticket);
    exposed.push_back(ms_since(end_compute));
  }
  src.view.writer_stream = nullptr;
  TANDEM_CUDA_CHECK(cudaStreamDestroy(writer));

  nlohmann::json j;
  j["backend"] = backend;
  j["bytes"] = all.bytes();
  j["single_ship_ms_median"] = median(single);
  j["single_ship_GBps"] = gb / (median(single) / 1e3);
  j["pipelined_GBps"] = gb / (pipelined_ms / 1e3);
  j["exposed_after_last_chunk_ms_median"] = median(exposed);
  j["chunk_tokens"] = kChunk;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  int src_dev = 0, dst_dev = gpu_device_count() >= 2 ? 1 : 0, reps = 20;
  std::string out;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--src")
      src_dev = std::atoi(argv[i + 1]);
    else if (a == "--dst")
      dst_dev = std::atoi(argv[i + 1]);
    else if (a == "--reps")
      reps = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--out")
      out = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: kv_ship_bench [--src N] [--dst N] [--reps N] [--out FILE]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, src_dev));
  nlohmann::json doc;
  doc["gpu"] = prop.name;
  doc["src_device"] = src_dev;
  doc["dst_device"] = dst_dev;
  doc["peer_access"] = gpu_peer_access(src_dev, dst_dev);
  doc["prompt_tokens"] = kTokens;
  doc["page_size"] = kPageSize;
  for (const Shape& s : {Shape{"qwen2.5-7b", 28, 4, 128}, Shape{"llama-3.1-8b", 32, 8, 128}}) {
    const int32_t pages = kTokens / kPageSize;
    Pool src(src_dev, s, pages), dst(dst_dev, s, pages);
    struct Case {
      const char* name;
      bool staged;
    };
    for (const Case& c : {Case{"peer", false}, Case{"peer_staged", true},
                          Case{"host_staged", false}, Case{"nccl", false}}) {
      GpuTransportOptions o;
      o.peer_staged = c.staged;
      const std::string n = c.name;
      auto t = n == "nccl"          ? make_nccl_transport(src.view, dst.view, o)
               : n == "host_staged" ? make_host_staged_transport(src.view, dst.view, o)
                                    : make_peer_transport(src.view, dst.view, o);
      if (!t.ok()) {
        std::fprintf(stderr, "%s %s: %s\n", s.name, c.name, t.error().to_string().c_str());
        continue;
      }
      nlohmann::json r = bench(c.name, **t, src, dst, reps);
      r["shape"] = s.name;
      std::printf("%s\n", r.dump().c_str());
      std::fflush(stdout);
      doc["results"].push_back(r);
    }
  }
  if (!out.empty()) std::ofstream(out) << doc.dump(2) << "\n";
  return 0;
}
