// runner/lru_map.h, the bound on the CUDA runner's captured graphs: which entry leaves, and that
// a lookup counts as a use.
#include "runner/lru_map.h"

#include <doctest/doctest.h>

#include <string>
#include <tuple>

namespace tandem {

TEST_CASE("LRU map: holds up to its capacity, then evicts the least recently used") {
  LruMap<int, std::string> m(3);
  CHECK_FALSE(m.insert(1, "one").has_value());
  CHECK_FALSE(m.insert(2, "two").has_value());
  CHECK_FALSE(m.insert(3, "three").has_value());
  CHECK(m.size() == 3);
  CHECK(m.find(4) == nullptr);
  // 1 is used again, so 2 is now the oldest.
  REQUIRE(m.find(1) != nullptr);
  CHECK(*m.find(1) == "one");
  auto out = m.insert(4, "four");
  REQUIRE(out.has_value());
  CHECK(out->first == 2);
  CHECK(out->second == "two");
  CHECK(m.find(2) == nullptr);
  CHECK(m.size() == 3);
  CHECK(m.evictions() == 1);
  // Insertion order decides among entries never looked up again: 3 before 1 (looked up), 4.
  out = m.insert(5, "five");
  REQUIRE(out.has_value());
  CHECK(out->first == 3);
  int held = 0;
  m.for_each([&](int key, const std::string& value) {
    CHECK((key == 1 || key == 4 || key == 5));
    CHECK_FALSE(value.empty());
    ++held;
  });
  CHECK(held == 3);
}

TEST_CASE("LRU map: a capacity of one keeps the last entry; tuple keys as the runner's") {
  LruMap<std::tuple<int, bool>, int> m(1);
  CHECK_FALSE(m.insert({1, true}, 10).has_value());
  auto out = m.insert({1, false}, 20);
  REQUIRE(out.has_value());
  CHECK(out->second == 10);
  REQUIRE(m.find({1, false}) != nullptr);
  CHECK(*m.find({1, false}) == 20);
  CHECK(m.capacity() == 1);
}

}  // namespace tandem
