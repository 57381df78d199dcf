// KV page bookkeeping. A page holds page_size tokens of K and V for every layer of one model
// (vLLM-style: one page id is valid in every layer's storage). The pool only hands out ids; the
// runner owns the memory behind them. Testable with no device at all.
//
// Prefix caching: pages are reference-counted, and a full page whose content is known (a hash of
// its whole token prefix, kv/prefix_hash.h) may be registered under that hash. Sequences with
// the same prefix then share the page (each holds a reference) instead of computing it again.
// A registered page whose last reference goes stays cached but free: `free_pages()` counts it,
// `cached_pages()` says how many such pages there are, and `allocate` reclaims them least
// recently released first once no uncached free page is left. Only full pages are shared and
// nobody writes into a full page, so no copy-on-write is needed.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace tandem {

class PagePool {
 public:
  explicit PagePool(int32_t num_pages);

  // All or nothing: n pages, each with one reference, or nullopt when fewer than n are free
  // (cached free pages count as free: they are evicted, oldest release first, when needed).
  std::optional<std::vector<int32_t>> allocate(int32_t n);
  // Drops one reference from each page, in reverse order (so a sequence's tail pages are
  // evicted before its head: the head is what other prompts share). Releasing an unreferenced
  // or foreign id is an invariant violation.
  void release(std::span<const int32_t> pages);

  // The page registered under `hash`, if any (referenced or cached free).
  std::optional<int32_t> find(uint64_t hash) const;
  // One more reference to a page: a registered free page leaves the eviction queue.
  void acquire(int32_t page);
  // Registers a referenced page's full content under `hash`. False (nothing changes) when the
  // page already has a hash or another page holds this one (two sequences computed the same
  // prefix at once: the first stays the cached copy).
  bool register_page(int32_t page, uint64_t hash);

  int32_t num_pages() const { return int32_t(refs_.size()); }
  // Pages a request can get: unreferenced ones, cached or not.
  int32_t free_pages() const { return num_pages() - used_pages(); }
  // Pages referenced by at least one sequence.
  int32_t used_pages() const { return used_; }
  // Unreferenced pages that still hold a registered prefix (part of free_pages()).
  int32_t cached_pages() const { return int32_t(evictable_.size()); }
  int32_t ref_count(int32_t page) const { return refs_[size_t(page)]; }
  uint64_t evictions() const { return evictions_; }

 private:
  void check_id(int32_t page) const;

  std::vector<int32_t> free_;  // stack of unreferenced, unregistered ids (fresh: 0, 1, 2, ...)
  std::vector<int32_t> refs_;  // [num_pages] reference counts
  int32_t used_ = 0;           // pages with refs > 0
  // Registered pages: hash -> page, and per page its hash while it has one.
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::vector<std::optional<uint64_t>> hash_of_;  // [num_pages]
  // Unreferenced registered pages, least recently released at the front.
  std::list<int32_t> evictable_;
  std::vector<std::list<int32_t>::iterator> lru_pos_;  // [num_pages] valid while evictable
  uint64_t evictions_ = 0;
};

inline int32_t pages_for_tokens(int64_t tokens, int32_t page_size) {
  return int32_t((tokens + page_size - 1) / page_size);
}

// The pages of one sequence in one pool, in token order.
struct BlockTable {
  std::vector<int32_t> pages;
  int64_t num_tokens = 0;    // tokens whose K/V are (or are being) written
  int32_t cached_pages = 0;  // leading pages already registered in (or found in) the cache

  // Grow to hold `tokens` tokens; false when the pool is out of pages (nothing allocated then).
  bool reserve(PagePool& pool, int64_t tokens, int32_t page_size);
  // Shrink to `tokens` tokens (speculative rollback), releasing whole pages past it.
  void truncate(PagePool& pool, int64_t tokens, int32_t page_size);
  void release_all(PagePool& pool);

  // On an empty table: takes a reference to the longest run of leading pages whose hashes
  // (`page_hashes`, one per full page) are cached, covering at most `max_tokens` tokens.
  // Returns the tokens they hold (whole pages); num_tokens is set to it.
  int64_t match_prefix(PagePool& pool, std::span<const uint64_t> page_hashes, int64_t max_tokens,
                       int32_t page_size);
  // Registers the full pages among the first `computed_tokens` tokens that are not registered
  // yet (their K/V must be written by then).
  void cache_full_pages(PagePool& pool, std::span<const uint64_t> page_hashes,
                        int64_t computed_tokens, int32_t page_size);
};

}  // namespace tandem
