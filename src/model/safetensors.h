// safetensors files, memory-mapped: a validated index of tensors whose bytes stay in the page
// cache. Never copies weights; the runner uploads or reads them in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace tandem {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // inside an mmap; valid while the WeightStore lives
  size_t nbytes = 0;
  std::string file;  // which shard, for messages

  int64_t numel() const;
};

class MappedFile;

// All tensors of a model directory: one file or a sharded set listed by
// model.safetensors.index.json. Validation (header length, JSON, offsets inside the file,
// dtype × shape == bytes, overlaps, duplicates across shards, index entries that point at a
// missing tensor) happens in open(); each problem is an Error naming the file and tensor.
class WeightStore {
 public:
  static Result<WeightStore> open(const std::string& model_dir);
  // One file, for tests and tools.
  static Result<WeightStore> open_file(const std::string& path);

  WeightStore(WeightStore&&) noexcept;
  WeightStore& operator=(WeightStore&&) noexcept;
  ~WeightStore();

  const TensorView* find(const std::string& name) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  size_t total_bytes() const;

 private:
  WeightStore() = default;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, TensorView> tensors_;
};

// Writes a safetensors file tensor by tensor, so a 15 GB model never sits in memory
// (mkmodel, golden tools, tests that build broken files).
class SafetensorsWriter {
 public:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  // Declares every tensor up front (the header comes first in the file).
  static Result<SafetensorsWriter> create(const std::string& path, std::vector<Entry> entries,
                                          const std::map<std::string, std::string>& metadata = {});
  SafetensorsWriter(SafetensorsWriter&&) noexcept;
  ~SafetensorsWriter();
  // Appends the bytes of the next tensor, in declaration order; may be called in pieces.
  Status write(std::span<const std::byte> bytes);
  Status finish();

 private:
  SafetensorsWriter() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
