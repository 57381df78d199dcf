#include <doctest/doctest.h>

#include <cstring>
#include <numeric>

#include "transport/local/local_transport.h"

using namespace tandem;

namespace {

// A host KV pool whose bytes are distinct per (layer, K/V, page, byte) so misplaced copies show.
struct HostPool {
  HostPool(int32_t layers, int32_t pages, size_t page_bytes, uint8_t salt)
      : storage(size_t(layers) * 2 * size_t(pages) * page_bytes) {
    for (size_t i = 0; i < storage.size(); ++i) storage[i] = std::byte(uint8_t(i * 7 + salt));
    view.page_bytes = page_bytes;
    view.num_pages = pages;
    for (int32_t l = 0; l < layers; ++l) {
      view.k.push_back(storage.data() + size_t(2 * l) * size_t(pages) * page_bytes);
      view.v.push_back(storage.data() + size_t(2 * l + 1) * size_t(pages) * page_bytes);
    }
  }
  std::byte* page(bool v, int32_t layer, int32_t p) {
    return (v ? view.v : view.k)[size_t(layer)] + size_t(p) * view.page_bytes;
  }
  std::vector<std::byte> storage;
  KvPoolView view;
};

}  // namespace

TEST_CASE("local transport copies exactly the listed pages of the listed layers") {
  HostPool src(4, 6, 32, 1), dst(4, 9, 32, 99);
  const HostPool dst_before = dst;
  LocalTransport t;
  ShipOrder order{&src.view, &dst.view, {{0, 8}, {5, 2}}, 1, 3};
  auto ticket = t.ship(order);
  REQUIRE(ticket.ok());
  CHECK(t.wait(*ticket, std::chrono::milliseconds(100)) == ShipState::kDone);
  CHECK(order.bytes() == 2 * 2 * 2 * 32);
  for (int32_t l = 0; l < 4; ++l) {
    for (int32_t p = 0; p < 9; ++p) {
      for (bool v : {false, true}) {
        const bool copied = (l == 1 || l == 2) && (p == 8 || p == 2);
        const std::byte* want = copied ? src.page(v, l, p == 8 ? 0 : 5)
                                       : const_cast<HostPool&>(dst_before).page(v, l, p);
        CHECK(std::memcmp(dst.page(v, l, p), want, 32) == 0);
      }
    }
  }
  t.release(*ticket);
}

TEST_CASE("ship orders that cannot run are refused before any copy") {
  HostPool a(2, 4, 16, 0), b(3, 4, 16, 0), c(2, 4, 8, 0);
  LocalTransport t;
  CHECK(t.ship({&a.view, &b.view, {{0, 0}}, 0, 2}).error().code == ErrorCode::kTransport);
  CHECK(t.ship({&a.view, &c.view, {{0, 0}}, 0, 2}).error().code == ErrorCode::kTransport);
  CHECK(t.ship({&a.view, &a.view, {{0, 4}}, 0, 2}).error().message.find("outside") !=
        std::string::npos);
  CHECK_FALSE(t.ship({&a.view, &a.view, {{0, 1}}, 1, 1}).ok());
}

TEST_CASE("injected failures and stalls surface as typed errors") {
  HostPool a(1, 2, 8, 0), b(1, 2, 8, 5);
  LocalTransport t;
  t.set_fault_hook([](const ShipOrder& o) -> std::optional<Error> {
    if (o.pages[0].src == 0) return make_error(ErrorCode::kTransport, "injected");
    return make_error(ErrorCode::kTimeout, "stuck");
  });
  auto failed = t.ship({&a.view, &b.view, {{0, 0}}, 0, 1});
  REQUIRE(failed.ok());
  CHECK(t.poll(*failed) == ShipState::kFailed);
  CHECK(t.take_error(*failed).message == "injected");
  auto stuck = t.ship({&a.view, &b.view, {{1, 1}}, 0, 1});
  REQUIRE(stuck.ok());
  CHECK(t.poll(*stuck) == ShipState::kInFlight);
  CHECK(t.wait(*stuck, std::chrono::milliseconds(5)) == ShipState::kFailed);
  CHECK(t.take_error(*stuck).code == ErrorCode::kTimeout);
}
