// A read-only memory map of a whole file; weights stay in the page cache and are never copied.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/error.h"

namespace tandem {

class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const std::byte* data_ = nullptr;  // null for an empty file
  size_t size_ = 0;
};

}  // namespace tandem
