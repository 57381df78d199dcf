#include <doctest/doctest.h>

#include <string>
#include <tuple>
#include <vector>

#include "transport/choose_transport.h"
#include "transport/ship_pieces.h"

using namespace tandem;

namespace {

std::string pick(const char* requested, int src, int dst, bool p2p, bool cuda = true) {
  auto r = choose_transport(requested, TransportProbe{src, dst, p2p, cuda});
  return r.ok() ? *r : "error: " + r.error().message;
}

}  // namespace

TEST_CASE("auto picks by what the probe found") {
  CHECK(pick("auto", -1, -1, false) == "local");
  CHECK(pick("auto", 0, 0, true) == "local");  // one GPU: colocated, nothing shipped
  CHECK(pick("auto", 0, 1, true) == "peer");
  CHECK(pick("auto", 0, 1, false) == "host_staged");
}

TEST_CASE("explicit choices are honoured or refused with a message naming --kv-transport") {
  CHECK(pick("peer", 0, 0, true) == "peer");  // forced shipping on one GPU (tests)
  CHECK(pick("host_staged", 1, 1, false) == "host_staged");
  CHECK(pick("nccl", 0, 1, false) == "nccl");
  CHECK(pick("peer", 0, 1, false) == "peer");  // staged by the driver without P2P
  CHECK(pick("local", -1, -1, false) == "local");
  for (auto [req, src, dst] : {std::tuple{"nccl", 0, 0}, std::tuple{"peer", -1, -1},
                               std::tuple{"local", 0, 1}, std::tuple{"bogus", 0, 1}}) {
    CAPTURE(req);
    const std::string got = pick(req, src, dst, true);
    CHECK(got.rfind("error: --kv-transport " + std::string(req), 0) == 0);
  }
  CHECK(pick("nccl", 0, 0, true).find("itself") != std::string::npos);
  CHECK(pick("auto", -1, 0, true).find("both stages") != std::string::npos);
  CHECK(pick("peer", 0, 1, true, /*cuda=*/false).find("-Dcuda=enabled") != std::string::npos);
  CHECK(choose_transport("bogus", {}).error().code == ErrorCode::kInvalidArgument);
  CHECK(choose_transport("nccl", {0, 0, true, true}).error().code == ErrorCode::kUnsupported);
}

TEST_CASE("ship pieces cover every (layer, pair) once and respect the slot and launch limits") {
  struct Case {
    int32_t pairs, lb, le;
    size_t page_bytes, max_bytes;
    int32_t max_pairs;
  };
  for (const Case& c :
       {Case{128, 0, 28, 16384, size_t(16) << 20, 480}, Case{2048, 0, 28, 64, size_t(1) << 20, 480},
        Case{7, 3, 5, 32, 64, 480},     // one pair of one layer per piece
        Case{9, 0, 4, 32, 1000, 2},     // the launch limit cuts page runs
        Case{1, 0, 1, 16, 32, 480}}) {  // exactly fits
    CAPTURE(c.pairs);
    CAPTURE(c.max_bytes);
    auto pieces = plan_ship_pieces(c.pairs, c.lb, c.le, c.page_bytes, c.max_bytes, c.max_pairs);
    REQUIRE(pieces.ok());
    std::vector<int> seen(size_t(c.pairs) * size_t(c.le), 0);
    size_t total = 0;
    for (const ShipPiece& p : *pieces) {
      CHECK(p.bytes <= c.max_bytes);
      CHECK(p.pair_end - p.pair_begin <= c.max_pairs);
      CHECK(p.bytes == size_t(p.layer_end - p.layer_begin) * size_t(p.pair_end - p.pair_begin) * 2 *
                           c.page_bytes);
      total += p.bytes;
      for (int32_t l = p.layer_begin; l < p.layer_end; ++l) {
        for (int32_t i = p.pair_begin; i < p.pair_end; ++i) seen[size_t(l * c.pairs + i)]++;
      }
    }
    CHECK(total == size_t(c.pairs) * size_t(c.le - c.lb) * 2 * c.page_bytes);
    for (int32_t l = 0; l < c.le; ++l) {
      for (int32_t i = 0; i < c.pairs; ++i) CHECK(seen[size_t(l * c.pairs + i)] == (l >= c.lb));
    }
  }
  CHECK(plan_ship_pieces(4, 0, 2, 64, 100, 480).error().code == ErrorCode::kTransport);
  CHECK(plan_ship_pieces(0, 0, 2, 64, 100, 480)->empty());
}
