// The CPU Linear's dot products (runner/cpu/dot_rows.h) against the summation order they
// promise, written out one scalar at a time: equal bits for every token, row and length,
// whatever the batch. On a machine with AVX2 this checks the AVX2 copy against the scalar order.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "runner/cpu/dot_rows.h"

namespace tandem {
namespace {

// Lane j sums a[i + j] * b[i + j] over i = 0, 8, ...; a fixed tree over the lanes; the tail in
// order; then the bias.
float reference_dot(const float* a, const float* b, int64_t k, float bias) {
  float lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] = lane[j] + a[i + j] * b[i + j];
  float tail = 0;
  for (; i < k; ++i) tail = tail + a[i] * b[i];
  const float tree =
      ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
  return (tree + tail) + bias;
}

// Values spread over several binades and both signs, so that the order of the sums shows in the
// low bits (uniform values in [-1, 1) would hide fewer reorderings).
std::vector<float> awkward(size_t count, uint32_t seed) {
  std::vector<float> v(count);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    const float mant = float(s >> 8) / float(1u << 24);  // [0, 1)
    const int exp = int((s >> 3) % 9) - 4;
    x = std::ldexp(mant - 0.5f, exp);
  }
  return v;
}

uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}

}  // namespace

TEST_CASE("dot_rows_f32 keeps one summation order for every batch, block and length") {
  for (int64_t k : {1, 7, 8, 9, 63, 64, 96, 131}) {
    for (int64_t count : {1, 2, 3, 4, 5, 16, 17}) {
      for (int64_t n : {1, 2, 3, 4, 5, 7, 9}) {
        CAPTURE(k);
        CAPTURE(count);
        CAPTURE(n);
        const auto x = awkward(size_t(n * k), uint32_t(k * 31 + n));
        const auto rows = awkward(size_t(count * k), uint32_t(k * 7 + count));
        const auto bias = awkward(size_t(count), 99);
        for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
          const int64_t ldy = count + 3;                    // outputs strided as in a Linear
          std::vector<float> y(size_t(n * ldy), 12345.0f);  // poisoned
          dot_rows_f32(x.data(), n, rows.data(), count, k, b, y.data(), ldy);
          int64_t wrong = 0;
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t r = 0; r < count; ++r) {
              const float want =
                  reference_dot(x.data() + t * k, rows.data() + r * k, k, b ? b[r] : 0.0f);
              wrong += bits(y[size_t(t * ldy + r)]) != bits(want);
            }
            // Past count in each output row: untouched.
            for (int64_t r = count; r < ldy; ++r) wrong += y[size_t(t * ldy + r)] != 12345.0f;
          }
          CHECK(wrong == 0);
          // A token alone gives the bits it had in the batch (speculative verification compares
          // a k+1-token forward with one-token steps).
          std::vector<float> alone(static_cast<size_t>(count));
          dot_rows_f32(x.data() + (n - 1) * k, 1, rows.data(), count, k, b, alone.data(), count);
          for (int64_t r = 0; r < count; ++r)
            CHECK(bits(alone[size_t(r)]) == bits(y[size_t((n - 1) * ldy + r)]));
        }
      }
    }
  }
}

TEST_CASE("dot_rows_bf16 equals dot_rows_f32 on the widened rows, bit for bit") {
  for (int64_t k : {1, 8, 13, 64, 100}) {
    for (int64_t count : {1, 3, 4, 6, 16}) {
      CAPTURE(k);
      CAPTURE(count);
      const auto x = awkward(size_t(k), uint32_t(k));
      const auto wide = awkward(size_t(count * k), uint32_t(k + count));
      std::vector<uint16_t> half(wide.size());
      std::vector<float> widened(wide.size());
      for (size_t i = 0; i < wide.size(); ++i) {
        half[i] = f32_to_bf16(wide[i]);
        widened[i] = bf16_to_f32(half[i]);
      }
      const auto bias = awkward(size_t(count), 5);
      std::vector<float> got(size_t(count), 12345.0f), want(size_t(count), -1.0f);
      dot_rows_bf16(x.data(), half.data(), count, k, bias.data(), got.data());
      dot_rows_f32(x.data(), 1, widened.data(), count, k, bias.data(), want.data(), count);
      for (int64_t r = 0; r < count; ++r) {
        CHECK(bits(got[size_t(r)]) == bits(want[size_t(r)]));
        CHECK(bits(want[size_t(r)]) ==
              bits(reference_dot(x.data(), widened.data() + r * k, k, bias[size_t(r)])));
      }
    }
  }
}

TEST_CASE("dot_f32 has the same order") {
  for (int64_t k : {0, 1, 9, 64, 77}) {
    const auto a = awkward(size_t(k) + 1, 3), b = awkward(size_t(k) + 1, 4);
    // reference_dot adds a zero bias; dot_f32 adds none (the two differ only for -0).
    const float got = dot_f32(a.data(), b.data(), k);
    CHECK(bits(got + 0.0f) == bits(reference_dot(a.data(), b.data(), k, 0.0f)));
  }
}

}  // namespace tandem
