// Identity of a full KV page's content for prefix caching. A page's hash chains the hash of the
// page before it (the first page chains a seed that names what else shapes KV: the model) with
// the page's own token ids, so two pages hash equal only when their whole prefixes are equal.
// The hash is SipHash-2-4 under a 128-bit key: keyed, so a client cannot craft two prompts that
// collide on purpose and read another request's KV (the attack vLLM's CVE-2025-25183 describes
// for an unkeyed hash); engines draw a random key at start, tests pass a fixed one.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace tandem {

class PrefixHasher {
 public:
  // `key`: [2] SipHash key words. `model_identity`: anything that changes the KV a token sequence
  // produces (model directory, architecture, dtype); it seeds the chain.
  PrefixHasher(uint64_t key0, uint64_t key1, std::string_view model_identity);
  // A hasher with a key from the system's random source.
  static PrefixHasher with_random_key(std::string_view model_identity);

  uint64_t seed() const { return seed_; }
  // Hash of a page of `tokens` whose preceding page hashed to `parent` (seed() for page 0).
  uint64_t page_hash(uint64_t parent, std::span<const int32_t> tokens) const;

  // Extends `hashes` ([full pages] chain, possibly already partly computed) to every full page
  // of `tokens`. Token lists only grow, so earlier entries stay valid.
  void extend(std::span<const int32_t> tokens, int32_t page_size,
              std::vector<uint64_t>& hashes) const;

 private:
  uint64_t bytes_hash(std::span<const uint8_t> bytes) const;
  uint64_t k0_, k1_;
  uint64_t seed_;
};

}  // namespace tandem
