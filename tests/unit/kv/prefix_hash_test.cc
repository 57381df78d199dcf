#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "kv/prefix_hash.h"

using namespace tandem;

namespace {

std::vector<int32_t> tokens(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(1000 + (i * 37 + salt) % 5000);
  return t;
}

std::vector<uint64_t> chain(const PrefixHasher& h, const std::vector<int32_t>& t, int32_t page) {
  std::vector<uint64_t> out;
  h.extend(t, page, out);
  return out;
}

}  // namespace

TEST_CASE("page hashes chain: equal exactly as far as the prefixes are equal") {
  const PrefixHasher h(1, 2, "model-a");
  const std::vector<int32_t> a = tokens(50, 0);
  CHECK(chain(h, a, 16).size() == 3);  // full pages only; the last 2 tokens are not hashed
  CHECK(chain(h, a, 16) == chain(h, a, 16));

  std::vector<int32_t> b = a;
  b[20] += 1;  // differs in page 1
  const auto ha = chain(h, a, 16), hb = chain(h, b, 16);
  CHECK(ha[0] == hb[0]);
  CHECK(ha[1] != hb[1]);
  CHECK(ha[2] != hb[2]);  // page 2's tokens are equal, its prefix is not

  std::vector<int32_t> c = a;
  c[0] += 1;  // differs in page 0 only
  const auto hc = chain(h, c, 16);
  for (size_t i = 0; i < 3; ++i) CHECK(ha[i] != hc[i]);

  std::vector<int32_t> longer = a;  // a longer prompt with the same start agrees on its pages
  longer.insert(longer.end(), {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20});
  const auto hl = chain(h, longer, 16);
  REQUIRE(hl.size() == 4);
  for (size_t i = 0; i < 3; ++i) CHECK(hl[i] == ha[i]);

  // Pages are token-exact: the same ids split at another page size hash differently.
  CHECK(chain(h, a, 8)[1] != ha[0]);
}

TEST_CASE("the model identity and the key seed every chain") {
  const std::vector<int32_t> t = tokens(32, 3);
  const auto base = chain(PrefixHasher(1, 2, "model-a"), t, 16);
  CHECK(chain(PrefixHasher(1, 2, "model-b"), t, 16)[0] != base[0]);
  CHECK(chain(PrefixHasher(1, 3, "model-a"), t, 16)[0] != base[0]);
  CHECK(chain(PrefixHasher(1, 2, "model-a"), t, 16) == base);
  const PrefixHasher r1 = PrefixHasher::with_random_key("model-a");
  const PrefixHasher r2 = PrefixHasher::with_random_key("model-a");
  CHECK(r1.seed() != r2.seed());  // a fresh key per process: no precomputed collisions
}

TEST_CASE("extending a chain as tokens arrive gives the hashes of hashing all at once") {
  const PrefixHasher h(7, 9, "m");
  const std::vector<int32_t> t = tokens(70, 5);
  std::vector<uint64_t> grown;
  for (size_t n = 0; n <= t.size(); n += 3) {
    h.extend(std::span<const int32_t>(t.data(), n), 4, grown);
    CHECK(grown.size() == n / 4);
  }
  h.extend(t, 4, grown);
  CHECK(grown == chain(h, t, 4));
  // A few hundred thousand distinct one-page prompts: no two hash alike.
  std::vector<uint64_t> seen;
  for (int32_t a = 0; a < 600; ++a) {
    for (int32_t b = 0; b < 500; ++b) seen.push_back(h.page_hash(h.seed(), std::vector{a, b}));
  }
  std::sort(seen.begin(), seen.end());
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
}
