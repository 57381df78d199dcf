#include <doctest/doctest.h>

#include <cstdint>

#include "sampling/philox.h"
#include "sampling/sampler.h"

using namespace tandem;

TEST_CASE("philox4x32_10 matches Random123's known-answer vectors") {
  struct Kat {
    uint32_t ctr[4];
    uint32_t key[2];
    uint32_t out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    uint32_t out[4];
    philox4x32_10(k.ctr, k.key, out);
    for (int i = 0; i < 4; ++i) CHECK(out[i] == k.out[i]);
  }
}

TEST_CASE("philox_uniform takes 53 bits of the block at (counter, seed)") {
  // Block (0,0,0,0) under key (0,0): words 0x6627e8d5, 0xe169c58d.
  const uint64_t bits = ((uint64_t{0x6627e8d5} << 32) | 0xe169c58du) >> 11;
  CHECK(philox_uniform(0, 0) == double(bits) / 9007199254740992.0);
  // Seed and counter use both 32-bit halves: high words change the draw.
  CHECK(philox_uniform(uint64_t{1} << 32, 0) != philox_uniform(0, 0));
  CHECK(philox_uniform(0, uint64_t{1} << 32) != philox_uniform(0, 0));
  CHECK(philox_uniform(1, 0) != philox_uniform(0, 1));
}

TEST_CASE("philox_uniform is in [0, 1) with mean 1/2 and variance 1/12") {
  const int n = 200000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double u = philox_uniform(12345, uint64_t(i));
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    sum += u;
    sum_sq += u * u;
  }
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  // Standard errors: 0.00065 for the mean, 0.00019 for the variance; allow ~5 sigma.
  CHECK(mean == doctest::Approx(0.5).epsilon(0.0035 / 0.5));
  CHECK(var == doctest::Approx(1.0 / 12).epsilon(0.001 * 12));
}

TEST_CASE("SamplingRng draws are a pure function of (seed, counter)") {
  SamplingRng a{7, 0};
  double first[5];
  for (double& u : first) u = a.next_uniform();
  CHECK(a.counter == 5);
  // A request resumed at draw 3 (after preemption) continues the same stream.
  SamplingRng resumed{7, 3};
  CHECK(resumed.next_uniform() == first[3]);
  CHECK(resumed.next_uniform() == first[4]);
  SamplingRng other{8, 0};
  CHECK(other.next_uniform() != first[0]);
}
