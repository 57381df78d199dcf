#include "core/anonymous_memory.h"

#include <sys/mman.h>

#include <new>
#include <utility>

namespace tandem {

AnonymousMemory::AnonymousMemory(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  // No swap reserved up front: like an untouched malloc'd region, a page is committed when
  // written.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = p;
}

AnonymousMemory::~AnonymousMemory() {
  release();
}

AnonymousMemory::AnonymousMemory(AnonymousMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

AnonymousMemory& AnonymousMemory::operator=(AnonymousMemory&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void AnonymousMemory::release() {
  if (data_ != nullptr) munmap(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace tandem
