#include "kv/page_pool.h"

#include <algorithm>

#include "core/check.h"

namespace tandem {

PagePool::PagePool(int32_t num_pages) : in_use_(size_t(num_pages), 0) {
  TANDEM_CHECK(num_pages >= 0);
  free_.reserve(size_t(num_pages));
  for (int32_t id = num_pages - 1; id >= 0; --id) free_.push_back(id);
}

std::optional<std::vector<int32_t>> PagePool::allocate(int32_t n) {
  TANDEM_CHECK(n >= 0);
  if (n > free_pages()) return std::nullopt;
  std::vector<int32_t> out(free_.end() - n, free_.end());
  std::reverse(out.begin(), out.end());
  free_.resize(free_.size() - size_t(n));
  for (int32_t id : out) in_use_[size_t(id)] = 1;
  return out;
}

void PagePool::release(std::span<const int32_t> pages) {
  for (int32_t id : pages) {
    TANDEM_CHECK(id >= 0 && id < num_pages(), "page %d outside pool of %d", id, num_pages());
    TANDEM_CHECK(in_use_[size_t(id)] == 1, "page %d released twice", id);
    in_use_[size_t(id)] = 0;
    free_.push_back(id);
  }
}

bool BlockTable::reserve(PagePool& pool, int64_t tokens, int32_t page_size) {
  const int32_t need = pages_for_tokens(tokens, page_size) - int32_t(pages.size());
  if (need > 0) {
    auto got = pool.allocate(need);
    if (!got) return false;
    pages.insert(pages.end(), got->begin(), got->end());
  }
  return true;
}

void BlockTable::truncate(PagePool& pool, int64_t tokens, int32_t page_size) {
  TANDEM_CHECK(tokens >= 0 && tokens <= num_tokens);
  num_tokens = tokens;
  const size_t keep = size_t(pages_for_tokens(tokens, page_size));
  if (keep < pages.size()) {
    pool.release(std::span<const int32_t>(pages).subspan(keep));
    pages.resize(keep);
  }
}

void BlockTable::release_all(PagePool& pool) {
  pool.release(pages);
  pages.clear();
  num_tokens = 0;
}

}  // namespace tandem
