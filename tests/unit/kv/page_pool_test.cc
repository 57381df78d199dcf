#include <doctest/doctest.h>

#include <algorithm>

#include "kv/page_pool.h"

using namespace tandem;

TEST_CASE("page pool hands out all-or-nothing and takes pages back") {
  PagePool pool(8);
  auto a = pool.allocate(5);
  REQUIRE(a);
  CHECK(a->size() == 5);
  CHECK(pool.used_pages() == 5);
  CHECK_FALSE(pool.allocate(4));
  CHECK(pool.free_pages() == 3);  // a failed allocation takes nothing
  pool.release(*a);
  CHECK(pool.used_pages() == 0);
  auto b = pool.allocate(8);
  REQUIRE(b);
  std::sort(b->begin(), b->end());
  for (int32_t i = 0; i < 8; ++i) CHECK((*b)[size_t(i)] == i);  // every page, each once
}

TEST_CASE("block table grows by pages and truncates for rollback") {
  PagePool pool(10);
  BlockTable table;
  REQUIRE(table.reserve(pool, 17, 16));  // 17 tokens straddle a page boundary
  table.num_tokens = 17;
  CHECK(table.pages.size() == 2);
  REQUIRE(table.reserve(pool, 33, 16));
  table.num_tokens = 33;
  CHECK(table.pages.size() == 3);
  table.truncate(pool, 16, 16);
  CHECK(table.pages.size() == 1);
  CHECK(pool.used_pages() == 1);
  CHECK_FALSE(table.reserve(pool, 16 * 11, 16));
  CHECK(table.pages.size() == 1);
  table.release_all(pool);
  CHECK(pool.used_pages() == 0);
}

TEST_CASE("a shared page lives until its last reference goes, then stays cached but free") {
  PagePool pool(4);
  auto a = pool.allocate(1);
  REQUIRE(a);
  const int32_t page = (*a)[0];
  CHECK(pool.register_page(page, 0xabc));
  CHECK(pool.find(0xabc) == page);
  pool.acquire(page);  // a second sequence shares it
  CHECK(pool.ref_count(page) == 2);
  CHECK(pool.used_pages() == 1);
  pool.release(std::vector<int32_t>{page});
  CHECK(pool.ref_count(page) == 1);
  CHECK(pool.used_pages() == 1);
  CHECK(pool.cached_pages() == 0);
  pool.release(std::vector<int32_t>{page});
  CHECK(pool.used_pages() == 0);
  CHECK(pool.cached_pages() == 1);  // free (reclaimable) and still findable
  CHECK(pool.free_pages() == 4);
  CHECK(pool.find(0xabc) == page);
  pool.acquire(page);  // a hit on a free cached page takes it out of the eviction queue
  CHECK(pool.used_pages() == 1);
  CHECK(pool.cached_pages() == 0);
  CHECK_FALSE(pool.allocate(4));
  auto rest = pool.allocate(3);
  REQUIRE(rest);
  CHECK(std::find(rest->begin(), rest->end(), page) == rest->end());
  CHECK(pool.find(0xabc) == page);  // a referenced page is never evicted
  CHECK(pool.evictions() == 0);
}

TEST_CASE("eviction takes uncached free pages first, then the least recently released") {
  PagePool pool(6);
  auto pages = pool.allocate(6);
  REQUIRE(pages);
  for (int32_t i = 0; i < 4; ++i) REQUIRE(pool.register_page((*pages)[size_t(i)], 100 + i));
  const std::vector<int32_t> p = *pages;
  // Released one at a time: 2, 0, 3, 1 (cached), then 4 and 5 (never registered).
  for (int32_t i : {2, 0, 3, 1, 4, 5}) pool.release(std::vector<int32_t>{p[size_t(i)]});
  CHECK(pool.cached_pages() == 4);
  CHECK(pool.free_pages() == 6);
  pool.acquire(p[0]);  // a hit: page 0 leaves the queue, and goes back to its end on release
  pool.release(std::vector<int32_t>{p[0]});  // queue now: 2, 3, 1, 0

  auto got = pool.allocate(2);  // the two uncached pages, no eviction
  REQUIRE(got);
  CHECK(pool.evictions() == 0);
  CHECK(pool.cached_pages() == 4);
  auto one = pool.allocate(1);
  REQUIRE(one);
  CHECK((*one)[0] == p[2]);
  CHECK_FALSE(pool.find(102));  // evicted pages lose their hash
  CHECK(pool.find(103) == p[3]);
  auto two = pool.allocate(2);
  REQUIRE(two);
  CHECK((*two)[0] == p[3]);
  CHECK((*two)[1] == p[1]);
  CHECK(pool.find(100) == p[0]);  // the most recently used survives
  CHECK(pool.evictions() == 3);
  CHECK(pool.cached_pages() == 1);
}

TEST_CASE("a sequence's pages are queued tail first, so its shared head is evicted last") {
  PagePool pool(3);
  BlockTable table;
  REQUIRE(table.reserve(pool, 12, 4));
  const std::vector<int32_t> p = table.pages;
  table.cache_full_pages(pool, std::vector<uint64_t>{7, 8, 9}, 12, 4);
  CHECK(table.cached_pages == 3);
  table.release_all(pool);
  auto one = pool.allocate(1);
  REQUIRE(one);
  CHECK((*one)[0] == p[2]);
  CHECK(pool.find(7) == p[0]);
  CHECK(pool.find(8) == p[1]);
}

TEST_CASE("a hash already cached on another page is not registered twice") {
  PagePool pool(2);
  auto a = pool.allocate(2);
  REQUIRE(a);
  CHECK(pool.register_page((*a)[0], 5));
  CHECK_FALSE(pool.register_page((*a)[1], 5));  // computed twice at once: the first one stays
  CHECK_FALSE(pool.register_page((*a)[0], 6));  // a page has one content
  CHECK(pool.find(5) == (*a)[0]);
  CHECK_FALSE(pool.find(6));
  pool.release(*a);
  CHECK(pool.cached_pages() == 1);  // the duplicate went back as a plain free page
}

TEST_CASE("prefix match shares the leading cached pages up to a token limit") {
  PagePool pool(8);
  BlockTable first;
  REQUIRE(first.reserve(pool, 14, 4));  // 3 full pages and a partial one
  first.num_tokens = 14;
  const std::vector<uint64_t> hashes = {11, 12, 13};
  first.cache_full_pages(pool, hashes, 9, 4);  // only 9 tokens written so far: 2 pages
  CHECK(first.cached_pages == 2);
  first.cache_full_pages(pool, hashes, 14, 4);
  CHECK(first.cached_pages == 3);

  BlockTable second;
  CHECK(second.match_prefix(pool, std::vector<uint64_t>{11, 12, 13, 14}, 100, 4) == 12);
  CHECK(second.pages == std::vector<int32_t>(first.pages.begin(), first.pages.begin() + 3));
  CHECK(second.num_tokens == 12);
  for (int32_t pg : second.pages) CHECK(pool.ref_count(pg) == 2);
  second.release_all(pool);

  BlockTable capped;  // a 12-token prompt must compute its last token: at most 11 from cache
  CHECK(capped.match_prefix(pool, hashes, 11, 4) == 8);
  CHECK(capped.pages.size() == 2);
  capped.release_all(pool);

  BlockTable other;  // a different first page matches nothing, whatever follows
  CHECK(other.match_prefix(pool, std::vector<uint64_t>{99, 12, 13}, 100, 4) == 0);
  CHECK(other.pages.empty());

  first.release_all(pool);
  CHECK(pool.used_pages() == 0);
  CHECK(pool.cached_pages() == 3);
}
