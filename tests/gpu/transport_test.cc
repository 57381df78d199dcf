// The GPU transports on one GPU (both pools on cuda:0): byte-exact page moves against a host
// mirror, ordering after the source pool's writer stream, fault injection, and the engine with
// shipping forced on one device giving the colocated run's greedy tokens.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <tuple>

#include "engine/disaggregated_engine.h"
#include "transport/gpu/gpu_transports.h"
#include "transport/make_transport.h"
#include "transport_test_util.h"

using namespace tandem;
using namespace tandem::gpu_test;

namespace {

struct Backend {
  const char* name;
  size_t slot_bytes;  // small slots force many pieces and slot reuse
  bool peer_staged;
};

Result<std::unique_ptr<GpuTransport>> make(const Backend& b, const KvPoolView& src,
                                           const KvPoolView& dst) {
  GpuTransportOptions o;
  o.slot_bytes = b.slot_bytes;
  o.peer_staged = b.peer_staged;
  if (std::string(b.name) == "host_staged") return make_host_staged_transport(src, dst, o);
  if (std::string(b.name) == "nccl") return make_nccl_transport(src, dst, o);
  return make_peer_transport(src, dst, o);
}

const Backend kBackends[] = {
    {"peer", 0, false},            // direct kernel on one device
    {"peer", 0, true},             // gather -> cudaMemcpyPeerAsync -> scatter
    {"peer", 3000, true},          // tiny slots: a piece per page or two
    {"host_staged", 0, false},     // default 8 MiB slots
    {"host_staged", 5000, false},  // many pieces through both pinned slots
};

}  // namespace

TEST_CASE("peer and host_staged move exactly the listed pages of the listed layers") {
  // page_bytes: tiny-qwen with pages of 1 and 16 (KVH 2, D 16, bf16), a Qwen2.5-7B page of 16
  // (KVH 4, D 128), and an unaligned size that takes the byte path.
  struct Shape {
    int32_t layers, pages;
    size_t page_bytes;
  };
  std::mt19937 g(7);
  for (const Backend& b : kBackends) {
    for (const Shape& s :
         {Shape{3, 40, 64}, Shape{3, 40, 1024}, Shape{4, 24, 16384}, Shape{2, 30, 24}}) {
      CAPTURE(b.name);
      CAPTURE(b.slot_bytes);
      CAPTURE(b.peer_staged);
      CAPTURE(s.page_bytes);
      if (b.slot_bytes && b.slot_bytes < 2 * s.page_bytes) continue;
      DevicePool src(0, s.layers, s.pages, s.page_bytes, 1);
      DevicePool dst(0, s.layers, s.pages + 5, s.page_bytes, 2);
      auto t = make(b, src.view, dst.view);
      REQUIRE_MESSAGE(t.ok(), t.error().to_string());
      // Several tickets in flight at once, later ones overwriting pages of earlier ones: they
      // must land in order.
      std::vector<KvTransport::Ticket> tickets;
      for (auto [lb, le, n] : {std::tuple{0, s.layers, s.pages}, std::tuple{1, 2, 7},
                               std::tuple{s.layers - 1, s.layers, 1}, std::tuple{0, 2, 13}}) {
        const ShipOrder order = random_order(src, dst, n, lb, le, g);
        dst.expect(order, src);
        auto ticket = (*t)->ship(order);
        REQUIRE_MESSAGE(ticket.ok(), ticket.error().to_string());
        tickets.push_back(*ticket);
      }
      for (auto ticket : tickets) {
        CHECK((*t)->wait(ticket, std::chrono::seconds(10)) == ShipState::kDone);
        (*t)->release(ticket);
      }
      CHECK(dst.matches());
    }
  }
}

TEST_CASE("a ship waits for the forward still writing its source pages, without a host sync") {
  DevicePool src(0, 2, 8, 1024, 3), dst(0, 2, 8, 1024, 4);
  cudaStream_t writer;
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&writer, cudaStreamNonBlocking));
  src.view.writer_stream = writer;
  void* pinned = nullptr;
  TANDEM_CUDA_CHECK(cudaMallocHost(&pinned, src.host.size()));
  for (const Backend& b : kBackends) {
    CAPTURE(b.name);
    auto t = make(b, src.view, dst.view);
    REQUIRE(t.ok());
    // The writer stalls 50 ms, then rewrites the whole source pool: the ship must see the
    // rewritten bytes.
    TANDEM_CUDA_CHECK(cudaLaunchHostFunc(
        writer, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); },
        nullptr));
    std::mt19937 g(5);
    for (auto& x : src.host) x = std::byte(uint8_t(g()));
    std::memcpy(pinned, src.host.data(), src.host.size());  // pinned: a truly async copy
    TANDEM_CUDA_CHECK(
        cudaMemcpyAsync(src.base, pinned, src.host.size(), cudaMemcpyHostToDevice, writer));
    const ShipOrder order = random_order(src, dst, 8, 0, 2, g);
    dst.expect(order, src);
    auto ticket = (*t)->ship(order);
    REQUIRE(ticket.ok());
    CHECK((*t)->poll(*ticket) == ShipState::kInFlight);  // still behind the writer
    CHECK((*t)->wait(*ticket, std::chrono::seconds(10)) == ShipState::kDone);
    CHECK(dst.matches());
    (*t)->release(*ticket);
  }
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(writer));
  TANDEM_CUDA_CHECK(cudaStreamDestroy(writer));
  TANDEM_CUDA_CHECK(cudaFreeHost(pinned));
}

TEST_CASE("injected failures and stalls surface as typed errors; later tickets still land") {
  DevicePool src(0, 2, 6, 64, 5), dst(0, 2, 6, 64, 6);
  for (const Backend& b : kBackends) {
    CAPTURE(b.name);
    auto t = make(b, src.view, dst.view);
    REQUIRE(t.ok());
    (*t)->set_fault_hook([](const ShipOrder& o) -> std::optional<Error> {
      if (o.pages[0].src == 0) return make_error(ErrorCode::kTransport, "injected");
      if (o.pages[0].src == 1) return make_error(ErrorCode::kTimeout, "stuck");
      return std::nullopt;
    });
    auto failed = (*t)->ship({&src.view, &dst.view, {{0, 0}}, 0, 2});
    REQUIRE(failed.ok());
    CHECK((*t)->poll(*failed) == ShipState::kFailed);
    CHECK((*t)->take_error(*failed).message == "injected");
    auto stuck = (*t)->ship({&src.view, &dst.view, {{1, 1}}, 0, 2});
    REQUIRE(stuck.ok());
    CHECK((*t)->poll(*stuck) == ShipState::kInFlight);
    CHECK((*t)->wait(*stuck, std::chrono::milliseconds(5)) == ShipState::kFailed);
    CHECK((*t)->take_error(*stuck).code == ErrorCode::kTimeout);
    const ShipOrder ok{&src.view, &dst.view, {{2, 3}, {4, 5}}, 0, 2};
    dst.expect(ok, src);
    auto good = (*t)->ship(ok);
    REQUIRE(good.ok());
    CHECK((*t)->wait(*good, std::chrono::seconds(10)) == ShipState::kDone);
    CHECK(dst.matches());
    (*t)->release(*good);
  }
}

TEST_CASE("impossible GPU transports are refused with errors naming --kv-transport") {
  DevicePool a(0, 2, 4, 64, 1), b(0, 2, 4, 64, 2), c(0, 3, 4, 64, 3);
  auto nccl = make_transport("nccl", a.view, b.view);
  REQUIRE_FALSE(nccl.ok());
  CHECK(nccl.error().code == ErrorCode::kUnsupported);
  CHECK(nccl.error().message.find("--kv-transport nccl") != std::string::npos);
  KvPoolView absent = a.view;
  absent.device = 64;
  CHECK(make_transport("peer", a.view, absent).error().message.find("cuda:64") !=
        std::string::npos);
  auto peer = make_transport("peer", a.view, b.view);
  REQUIRE(peer.ok());
  CHECK((*peer)->name() == "peer");
  CHECK((*peer)->ship({&a.view, &c.view, {{0, 0}}, 0, 2}).error().code == ErrorCode::kTransport);
  CHECK((*peer)->ship({&b.view, &a.view, {{0, 0}}, 0, 2}).error().message.find("not the pools") !=
        std::string::npos);
}

TEST_CASE("shipping forced on one GPU gives the colocated run's greedy tokens") {
  const std::vector<int> lens = {1, 15, 16, 17, 40, 70};
  for (int32_t page : {1, 16}) {
    CAPTURE(page);
    const auto want =
        run_greedy(engine_options("cuda:0", "cuda:0", "auto", page, 7), lens, 8, false);
    for (const char* transport : {"peer", "host_staged"}) {
      CAPTURE(transport);
      for (bool concurrent : {false, true}) {
        CAPTURE(concurrent);
        const auto got =
            run_greedy(engine_options("cuda:0", "cuda:0", transport, page, 7), lens, 8, concurrent);
        CHECK(got == want);
      }
    }
  }
  auto nccl = Engine::create(engine_options("cuda:0", "cuda:0", "nccl", 16, 16));
  REQUIRE_FALSE(nccl.ok());
  CHECK(nccl.error().message.find("--kv-transport nccl") != std::string::npos);
}

TEST_CASE("an injected GPU transfer failure fails only its request, with no pages leaked") {
  for (ErrorCode fault : {ErrorCode::kTransport, ErrorCode::kTimeout}) {
    CAPTURE(error_code_name(fault));
    auto created = Engine::create(engine_options("cuda:0", "cuda:0", "peer", 4, 8));
    REQUIRE(created.ok());
    auto engine = std::move(created).value();
    auto* disagg = dynamic_cast<DisaggregatedEngine*>(engine.get());
    REQUIRE(disagg != nullptr);
    disagg->ship_timeout = std::chrono::milliseconds(20);
    auto* gpu = dynamic_cast<GpuTransport*>(&disagg->transport());
    REQUIRE(gpu != nullptr);
    gpu->set_fault_hook([fault](const ShipOrder& order) -> std::optional<Error> {
      if (testing::ships_to_page_zero(order)) return make_error(fault, "injected");
      return std::nullopt;
    });
    Collector col;
    REQUIRE(engine->submit(1, greedy(prompt_of(20, 1), 4), &col).ok());
    REQUIRE(engine->submit(2, greedy(prompt_of(20, 2), 4), &col).ok());
    engine->run_until_idle();
    testing::check_only_first_failed(col, fault);
    for (const PoolStatus& p : engine->status().pools) CHECK_MESSAGE(p.used_pages == 0, p.name);
  }
}
