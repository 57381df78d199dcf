// The sampler's radix-select stop (kernels/select_bin.h) against the serial walk it replaced:
// one thread going down a pass's 256 bins from the top, skipping empty ones, until the weight
// reaches the target. The kernel applies the rule to every bin from a block scan; here the scan
// is a plain loop.
#include "select_bin.h"

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <random>

namespace {

using tandem::kernels::select_stops_at;
using Bins = std::array<unsigned long long, 256>;

struct Stop {
  int bin = -1;
  unsigned long long above = 0;  // the weight above the chosen bin, `above` included
};

Stop serial_walk(const Bins& bins, unsigned long long above, unsigned long long target) {
  for (int b = 255; b >= 0; --b) {
    if (bins[size_t(b)] == 0) continue;
    if (above + bins[size_t(b)] >= target) return {b, above};
    above += bins[size_t(b)];
  }
  return {};
}

// Every bin the rule accepts, walking down as thread t = 255 - bin's inclusive scan does.
Stop scan_rule(const Bins& bins, unsigned long long above, unsigned long long target,
               int* accepted) {
  Stop stop;
  unsigned long long through = 0;
  *accepted = 0;
  for (int b = 255; b >= 0; --b) {
    const unsigned long long w = bins[size_t(b)];
    through += w;
    if (select_stops_at(w, through, above, target)) {
      ++*accepted;
      stop = {b, above + (through - w)};
    }
  }
  return stop;
}

void check(const Bins& bins, unsigned long long above, unsigned long long target) {
  const Stop want = serial_walk(bins, above, target);
  int accepted = 0;
  const Stop got = scan_rule(bins, above, target, &accepted);
  CHECK(accepted == (want.bin >= 0 ? 1 : 0));
  CHECK(got.bin == want.bin);
  if (want.bin >= 0) CHECK(got.above == want.above);
}

}  // namespace

TEST_CASE("the radix select's stop: cases the serial walk decides at an edge") {
  Bins bins{};
  check(bins, 0, 0);  // nothing anywhere: no stop
  check(bins, 0, 5);
  bins[200] = 3;
  bins[10] = 4;
  check(bins, 0, 0);  // a target of 0 stops at the first non-empty bin: 200
  check(bins, 0, 3);  // reached exactly at 200
  check(bins, 0, 4);  // passes 200, stops at 10
  check(bins, 0, 7);  // reached exactly at 10
  check(bins, 0, 8);  // never reached
  check(bins, 2, 1);  // an earlier pass's weight already reaches the target: the first bin
  check(bins, 2, 5);  // 2 + 3 reaches it at 200
  check(bins, 2, 6);
  bins[255] = 1;  // a non-empty top bin
  check(bins, 0, 1);
  check(bins, 0, 2);
}

TEST_CASE("the radix select's stop equals the serial walk on random histograms") {
  std::mt19937_64 rng(52);
  for (int it = 0; it < 20000; ++it) {
    Bins bins{};
    const int filled = int(rng() % 8);
    for (int i = 0; i < filled; ++i) {
      const unsigned long long kinds[] = {0, 1, 2, rng() % (1ull << 60)};
      bins[rng() % 256] = kinds[rng() % 4];
    }
    const unsigned long long aboves[] = {0, 0, rng() % 6};
    const unsigned long long targets[] = {0, 1, 2, 3, rng() % (1ull << 61)};
    check(bins, aboves[rng() % 3], targets[rng() % 5]);
  }
}
