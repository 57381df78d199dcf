// Tensors built in memory for dequantization tests: the bytes live beside the TensorView.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
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

}  // namespace tandem::testing
