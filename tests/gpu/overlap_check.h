// The check of every overlapped-launch test (kernels/pdl.cuh): run(overlap, graphs) gives a
// sequence of forwards' logits, and the overlapped launches must reproduce the plain launches'
// bits, with graphs and eager, over three reruns. A read or write on the wrong side of a
// kernel's wait shows up as a difference.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <vector>

namespace tandem::gpu_test {

template <typename Run>
void check_overlap_bits(Run run) {
  for (bool graphs : {true, false}) {
    CAPTURE(graphs);
    const std::vector<float> plain = run(false, graphs);
    for (int rerun = 0; rerun < 3; ++rerun) {
      const std::vector<float> overlapped = run(true, graphs);
      REQUIRE(overlapped.size() == plain.size());
      CHECK(std::memcmp(overlapped.data(), plain.data(), plain.size() * sizeof(float)) == 0);
    }
  }
}

}  // namespace tandem::gpu_test
