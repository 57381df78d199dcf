// Tensors built in memory for dequantization tests: the bytes live beside the TensorView.
#pragma once

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/quant_linear.h"
#include "model/safetensors.h"

namespace tandem::testing {

struct OwnedTensor {
  std::vector<std::byte> bytes;
  TensorView view;
};

template <typename T>
std::unique_ptr<OwnedTensor> owned_tensor(const std::string& name, DType dtype,
                                          std::vector<int64_t> shape,
                                          const std::vector<T>& values) {
  auto t = std::make_unique<OwnedTensor>();
  t->bytes.resize(values.size() * sizeof(T));
  std::memcpy(t->bytes.data(), values.data(), t->bytes.size());
  t->view.name = name;
  t->view.dtype = dtype;
  t->view.shape = std::move(shape);
  t->view.data = t->bytes.data();
  t->view.nbytes = t->bytes.size();
  t->view.file = "(test)";
  return t;
}

inline std::vector<uint16_t> to_f16(const std::vector<float>& v) {
  std::vector<uint16_t> out;
  for (float f : v) out.push_back(f32_to_f16(f));
  return out;
}

// An AWQ or GPTQ Linear over tensors the test owns.
inline LinearQuant int4_linear(QuantFormat f, int64_t out, int64_t in, int64_t group,
                               const TensorView* scales, const TensorView* zeros) {
  LinearQuant q;
  q.format = f;
  q.out_features = out;
  q.in_features = in;
  q.group_size = group;
  q.scale = scales;
  q.zeros = zeros;
  return q;
}

// Scales exactly representable in fp16 (what the checkpoint stores).
inline std::vector<float> random_f16_scales(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> d(0.001f, 0.05f);
  std::vector<float> s;
  for (size_t i = 0; i < n; ++i) s.push_back(f16_to_f32(f32_to_f16(d(rng))));
  return s;
}

inline std::vector<int32_t> random_words(std::mt19937& rng, size_t n) {
  std::vector<int32_t> v;
  for (size_t i = 0; i < n; ++i) v.push_back(int32_t(rng()));
  return v;
}

}  // namespace tandem::testing
