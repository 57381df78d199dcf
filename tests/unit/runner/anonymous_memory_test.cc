// The CPU runner's KV pools come from core/anonymous_memory.h: zeros on first touch, writable,
// owned by exactly one object across moves, and an empty object for zero bytes.
#include <doctest/doctest.h>

#include <cstdint>
#include <utility>

#include "core/anonymous_memory.h"

using namespace tandem;

TEST_CASE("anonymous memory: zero-filled, writable, moved without copies") {
  const size_t bytes = size_t(3) << 20;  // several pages, not a multiple of a huge page
  AnonymousMemory a(bytes);
  REQUIRE(a.as<uint8_t>() != nullptr);
  CHECK(a.size() == bytes);
  const uint8_t* p = a.as<uint8_t>();
  CHECK(p[0] == 0);
  CHECK(p[bytes / 2] == 0);
  CHECK(p[bytes - 1] == 0);
  a.as<uint8_t>()[bytes - 1] = 7;
  AnonymousMemory b(std::move(a));
  CHECK(a.as<uint8_t>() == nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state
  CHECK(a.size() == 0);
  CHECK(b.as<const uint8_t>() == p);
  CHECK(b.as<uint8_t>()[bytes - 1] == 7);
  AnonymousMemory c(4096);
  c = std::move(b);  // c's own mapping is released, b's taken over
  CHECK(c.as<const uint8_t>() == p);
  CHECK(b.as<uint8_t>() == nullptr);  // NOLINT(bugprone-use-after-move)
  const AnonymousMemory empty(0);
  CHECK(empty.as<uint8_t>() == nullptr);
  CHECK(empty.size() == 0);
}
