// KV page bookkeeping. A page holds page_size tokens of K and V for every layer of one model
// (vLLM-style: one page id is valid in every layer's storage). The pool only hands out ids; the
// runner owns the memory behind them. Testable with no device at all.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace tandem {

class PagePool {
 public:
  explicit PagePool(int32_t num_pages);

  // All or nothing: n pages, or nullopt when fewer than n are free.
  std::optional<std::vector<int32_t>> allocate(int32_t n);
  // Returns pages to the pool. Double frees and foreign ids are invariant violations.
  void release(std::span<const int32_t> pages);

  int32_t num_pages() const { return int32_t(in_use_.size()); }
  int32_t free_pages() const { return int32_t(free_.size()); }
  int32_t used_pages() const { return num_pages() - free_pages(); }

 private:
  std::vector<int32_t> free_;  // stack of free ids (a fresh pool hands out 0, 1, 2, ...)
  std::vector<uint8_t> in_use_;
};

inline int32_t pages_for_tokens(int64_t tokens, int32_t page_size) {
  return int32_t((tokens + page_size - 1) / page_size);
}

// The pages of one sequence in one pool, in token order.
struct BlockTable {
  std::vector<int32_t> pages;
  int64_t num_tokens = 0;  // tokens whose K/V are (or are being) written

  // Grow to hold `tokens` tokens; false when the pool is out of pages (nothing allocated then).
  bool reserve(PagePool& pool, int64_t tokens, int32_t page_size);
  // Shrink to `tokens` tokens (speculative rollback), releasing whole pages past it.
  void truncate(PagePool& pool, int64_t tokens, int32_t page_size);
  void release_all(PagePool& pool);
};

}  // namespace tandem
