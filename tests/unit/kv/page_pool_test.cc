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
