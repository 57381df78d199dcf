// Owning device (or pinned host) allocations for the CUDA runner; freed on destruction.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

namespace tandem {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer();

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void* ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // mapped: kernels may write it directly (device_ptr()), so a result needs no copy back.
  explicit PinnedBuffer(size_t bytes, bool mapped = false);
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)),
        device_ptr_(std::exchange(o.device_ptr_, nullptr)),
        bytes_(o.bytes_) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(device_ptr_, o.device_ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~PinnedBuffer();

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  // The device's address of a mapped buffer; null when it was not allocated mapped.
  template <typename T>
  T* device_ptr() const {
    return static_cast<T*>(device_ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  void* device_ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tandem
