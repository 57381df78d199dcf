// Large buffers straight from the kernel (a private anonymous mapping), whose pages cost nothing
// until written: the CPU runner's KV pools. malloc gives the same for sizes this large, unless
// the allocator is told to fill what it hands out (MALLOC_PERTURB_, which meson test sets): then
// every page of every pool was touched at creation, ~80% of the speculative engine suite's time.
#pragma once

#include <cstddef>

namespace tandem {

class AnonymousMemory {
 public:
  AnonymousMemory() = default;
  explicit AnonymousMemory(size_t bytes);  // zero-filled on first touch; std::bad_alloc if refused
  ~AnonymousMemory();
  AnonymousMemory(AnonymousMemory&& other) noexcept;
  AnonymousMemory& operator=(AnonymousMemory&& other) noexcept;
  AnonymousMemory(const AnonymousMemory&) = delete;
  AnonymousMemory& operator=(const AnonymousMemory&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return bytes_; }

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tandem
