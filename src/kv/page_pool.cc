#include "kv/page_pool.h"

#include <algorithm>

#include "core/check.h"

namespace tandem {

PagePool::PagePool(int32_t num_pages)
    : refs_(size_t(num_pages), 0), hash_of_(size_t(num_pages)), lru_pos_(size_t(num_pages)) {
  TANDEM_CHECK(num_pages >= 0);
  free_.reserve(size_t(num_pages));
  for (int32_t id = num_pages - 1; id >= 0; --id) free_.push_back(id);
}

void PagePool::check_id(int32_t page) const {
  TANDEM_CHECK(page >= 0 && page < num_pages(), "page %d outside pool of %d", page, num_pages());
}

std::optional<std::vector<int32_t>> PagePool::allocate(int32_t n) {
  TANDEM_CHECK(n >= 0);
  if (n > free_pages()) return std::nullopt;
  std::vector<int32_t> out;
  out.reserve(size_t(n));
  while (int32_t(out.size()) < n && !free_.empty()) {
    out.push_back(free_.back());
    free_.pop_back();
  }
  while (int32_t(out.size()) < n) {  // evict cached free pages, least recently released first
    const int32_t id = evictable_.front();
    evictable_.pop_front();
    by_hash_.erase(*hash_of_[size_t(id)]);
    hash_of_[size_t(id)].reset();
    ++evictions_;
    out.push_back(id);
  }
  for (int32_t id : out) refs_[size_t(id)] = 1;
  used_ += n;
  return out;
}

void PagePool::release(std::span<const int32_t> pages) {
  for (auto it = pages.rbegin(); it != pages.rend(); ++it) {
    const int32_t id = *it;
    check_id(id);
    TANDEM_CHECK(refs_[size_t(id)] > 0, "page %d released twice", id);
    if (--refs_[size_t(id)] > 0) continue;
    --used_;
    if (hash_of_[size_t(id)]) {
      lru_pos_[size_t(id)] = evictable_.insert(evictable_.end(), id);
    } else {
      free_.push_back(id);
    }
  }
}

std::optional<int32_t> PagePool::find(uint64_t hash) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

void PagePool::acquire(int32_t page) {
  check_id(page);
  if (refs_[size_t(page)] == 0) {
    // Only registered pages are reachable while unreferenced: they wait in the eviction queue.
    TANDEM_CHECK(hash_of_[size_t(page)].has_value(), "page %d acquired while free", page);
    evictable_.erase(lru_pos_[size_t(page)]);
    ++used_;
  }
  ++refs_[size_t(page)];
}

bool PagePool::register_page(int32_t page, uint64_t hash) {
  check_id(page);
  TANDEM_CHECK(refs_[size_t(page)] > 0, "page %d registered while free", page);
  if (hash_of_[size_t(page)] || by_hash_.count(hash)) return false;
  hash_of_[size_t(page)] = hash;
  by_hash_.emplace(hash, page);
  return true;
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
  cached_pages = std::min(cached_pages, int32_t(pages.size()));
}

void BlockTable::release_all(PagePool& pool) {
  pool.release(pages);
  pages.clear();
  num_tokens = 0;
  cached_pages = 0;
}

int64_t BlockTable::match_prefix(PagePool& pool, std::span<const uint64_t> page_hashes,
                                 int64_t max_tokens, int32_t page_size) {
  TANDEM_CHECK(pages.empty(), "prefix match on a table that holds %zu pages", pages.size());
  for (uint64_t h : page_hashes) {
    if (int64_t(pages.size() + 1) * page_size > max_tokens) break;
    auto page = pool.find(h);
    if (!page) break;
    pool.acquire(*page);
    pages.push_back(*page);
  }
  cached_pages = int32_t(pages.size());
  num_tokens = int64_t(pages.size()) * page_size;
  return num_tokens;
}

void BlockTable::cache_full_pages(PagePool& pool, std::span<const uint64_t> page_hashes,
                                  int64_t computed_tokens, int32_t page_size) {
  const int32_t full = int32_t(std::min<int64_t>(
      {computed_tokens / page_size, int64_t(page_hashes.size()), int64_t(pages.size())}));
  for (; cached_pages < full; ++cached_pages) {
    pool.register_page(pages[size_t(cached_pages)], page_hashes[size_t(cached_pages)]);
  }
}

}  // namespace tandem
