#include "model/pattern_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/check.h"
#include "model/random_weights.h"

namespace tandem::mkmodel {

namespace {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void store(float v, DType dtype, std::byte* out) {
  if (dtype == DType::kF32) {
    std::memcpy(out, &v, 4);
  } else {
    const uint16_t h = dtype == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
    std::memcpy(out, &h, 2);
  }
}

float load(const std::byte* in, DType dtype) {
  if (dtype == DType::kF32) {
    float v;
    std::memcpy(&v, in, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, in, 2);
  return dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

}  // namespace

PatternMap::PatternMap(const PatternOptions& options, const ModelConfig& config) {
  int64_t n = config.vocab_size;
  if (config.bos_token_id) n = std::min<int64_t>(n, *config.bos_token_id);
  if (options.tokens > 0) n = std::min<int64_t>(n, options.tokens);
  TANDEM_CHECK(n >= 3, "pattern model: a cycle of %lld ids is too short", (long long)n);
  // One random cycle through all n ids (Fisher-Yates on splitmix64): pi never has a short loop
  // that a run could get stuck in.
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  uint64_t state = mix64(options.seed ^ 0x70617474u);
  for (size_t i = order.size() - 1; i > 0; --i) {
    state = mix64(state + 0x9e3779b97f4a7c15ull);
    std::swap(order[i], order[state % (i + 1)]);
  }
  pi_.resize(size_t(n));
  pi_inv_.resize(size_t(n));
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t from = order[i], to = order[(i + 1) % order.size()];
    pi_[size_t(from)] = to;
    pi_inv_[size_t(to)] = from;
  }
  divergence_key_ = mix64(options.seed ^ 0x646976ull);
  const double d = std::clamp(options.divergence, 0.0, 1.0);
  threshold_ = d >= 1.0 ? UINT64_MAX : uint64_t(std::ldexp(d, 64));
}

bool PatternMap::diverges(int32_t t) const {
  return threshold_ == UINT64_MAX || mix64(divergence_key_ ^ uint64_t(t)) < threshold_;
}

std::array<int32_t, 2> PatternMap::sources(int32_t j) const {
  std::array<int32_t, 2> out{-1, -1};
  if (j < 0 || j >= tokens()) return out;
  const int32_t a = pi_inv_[size_t(j)];  // pi(a) == j
  if (!diverges(a)) out[0] = a;
  const int32_t b = pi_inv_[size_t(a)];  // pi(pi(b)) == j
  if (diverges(b)) out[1] = b;
  return out;
}

float pattern_residual_scale(const ModelConfig& c) {
  // With the input normalised to unit RMS and weights of std 0.02: v ~ 0.02 sqrt(hidden),
  // o_proj's output ~ 0.02 sqrt(q_out) * that; gate/up ~ g = 0.02 sqrt(hidden), silu(g) * up
  // ~ g^2 / 2, down_proj's output ~ 0.02 sqrt(intermediate) * that. Layers add independently.
  const double h = double(c.hidden_size);
  const double q_out = double(c.num_heads * c.head_dim);
  const double v = 0.02 * std::sqrt(h);
  const double o = 0.02 * std::sqrt(q_out) * v;
  const double down = 0.02 * std::sqrt(double(c.intermediate_size)) * 0.5 * v * v;
  const double all_layers = std::sqrt(double(c.num_layers) * (o * o + down * down));
  const double target = 0.1 * 0.02;  // a tenth of an embedding element's std
  return float(std::min(1.0, target / all_layers));
}

void fill_pattern_lm_head(const PatternMap& map, uint64_t embed_key, int64_t hidden, uint64_t first,
                          size_t count, DType dtype, std::byte* out) {
  const size_t elem = dtype_size(dtype);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t index = first + i;
    const int64_t row = int64_t(index / uint64_t(hidden)), col = int64_t(index % uint64_t(hidden));
    float v = 0;
    if (row < map.tokens()) {
      for (int32_t s : map.sources(int32_t(row))) {
        if (s >= 0) v += weight_value(embed_key, Init::kNormal, uint64_t(s * hidden + col));
      }
    }
    store(v, dtype, out + i * elem);
  }
}

void scale_values(std::byte* data, size_t count, DType dtype, float factor) {
  const size_t elem = dtype_size(dtype);
  for (size_t i = 0; i < count; ++i)
    store(load(data + i * elem, dtype) * factor, dtype, data + i * elem);
}

}  // namespace tandem::mkmodel
