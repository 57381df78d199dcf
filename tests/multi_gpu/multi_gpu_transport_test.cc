// Two GPUs (cuda:0 prefill, cuda:1 decode): every backend moves pages byte-exactly across the
// devices, and the engine's greedy tokens equal the one-GPU run's, alone and under 8 concurrent
// requests, and with a draft model speculating on the decode GPU. With fewer than two GPUs the test
// says so and exits 77 (meson: skipped).
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <tuple>

#include "transport/gpu/gpu_transports.h"
#include "transport/make_transport.h"
#include "transport_test_util.h"

using namespace tandem;
using namespace tandem::gpu_test;

namespace {

void require_two_gpus() {
  const int n = gpu_device_count();
  if (n < 2) {
    std::printf("multi_gpu: skipped, %d GPU(s) visible; this suite needs two\n", n);
    std::fflush(stdout);
    std::exit(77);
  }
}

}  // namespace

TEST_CASE("every backend moves pages byte-exactly from cuda:0 to cuda:1") {
  require_two_gpus();
  MESSAGE("peer access 0<->1: " << gpu_peer_access(0, 1));
  std::mt19937 g(9);
  struct Backend {
    const char* name;
    bool peer_staged;
    size_t slot_bytes;
  };
  for (const Backend& b :
       {Backend{"peer", false, 0}, Backend{"peer", true, 5000}, Backend{"host_staged", false, 5000},
        Backend{"nccl", false, 0}, Backend{"nccl", false, 5000}}) {
    for (size_t page_bytes : {size_t(64), size_t(1024), size_t(16384)}) {
      CAPTURE(b.name);
      CAPTURE(b.slot_bytes);
      CAPTURE(page_bytes);
      DevicePool src(0, 3, 40, page_bytes, 1);
      DevicePool dst(1, 3, 50, page_bytes, 2);
      GpuTransportOptions o;
      o.slot_bytes = b.slot_bytes;
      o.peer_staged = b.peer_staged;
      auto t = std::string(b.name) == "nccl" ? make_nccl_transport(src.view, dst.view, o)
               : std::string(b.name) == "host_staged"
                   ? make_host_staged_transport(src.view, dst.view, o)
                   : make_peer_transport(src.view, dst.view, o);
      REQUIRE_MESSAGE(t.ok(), t.error().to_string());
      std::vector<KvTransport::Ticket> tickets;
      for (auto [lb, le, n] :
           {std::tuple{0, 3, 40}, std::tuple{1, 2, 7}, std::tuple{2, 3, 1}, std::tuple{0, 3, 13}}) {
        const ShipOrder order = random_order(src, dst, n, lb, le, g);
        dst.expect(order, src);
        auto ticket = (*t)->ship(order);
        REQUIRE(ticket.ok());
        tickets.push_back(*ticket);
      }
      for (auto ticket : tickets) {
        CHECK((*t)->wait(ticket, std::chrono::seconds(20)) == ShipState::kDone);
        (*t)->release(ticket);
      }
      CHECK(dst.matches());
    }
  }
}

TEST_CASE("two GPUs give the one-GPU greedy tokens for every backend, alone and concurrent") {
  require_two_gpus();
  const std::vector<int> lens = {1, 15, 16, 17, 40, 70, 33, 100};  // 8 requests
  for (int32_t page : {1, 16}) {
    CAPTURE(page);
    const auto want =
        run_greedy(engine_options("cuda:0", "cuda:0", "auto", page, 7), lens, 12, false);
    for (const char* transport : {"auto", "peer", "nccl", "host_staged"}) {
      CAPTURE(transport);
      for (bool concurrent : {false, true}) {
        CAPTURE(concurrent);
        CHECK(run_greedy(engine_options("cuda:0", "cuda:1", transport, page, 7), lens, 12,
                         concurrent) == want);
      }
    }
  }
}

TEST_CASE("speculative decoding on two GPUs gives the one-GPU greedy tokens without a draft") {
  require_two_gpus();
  const std::vector<int> lens = {1, 17, 40, 70};
  const auto want = run_greedy(engine_options("cuda:0", "cuda:0", "auto", 16, 7), lens, 24, false);
  for (bool self : {false, true}) {  // a disagreeing draft; the target itself (always agrees)
    for (int32_t k : {1, 3, 8}) {
      CAPTURE(self);
      CAPTURE(k);
      EngineOptions o = engine_options("cuda:0", "cuda:1", "auto", 16, 7);
      o.draft_dir = self ? tiny_model_dir() : tiny_draft_dir();
      o.draft_max = k;
      o.draft_min = 1;
      CHECK(run_greedy(o, lens, 24, /*concurrent=*/true) == want);
    }
  }
}
