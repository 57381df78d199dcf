#include "kv/prefix_hash.h"

#include <cstring>
#include <random>

#include "core/check.h"

namespace tandem {

namespace {

inline uint64_t rotl(uint64_t x, int b) {
  return (x << b) | (x >> (64 - b));
}

struct SipState {
  uint64_t v0, v1, v2, v3;
  void round() {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  }
  void absorb(uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

inline uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void append_le(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(uint8_t(v >> (8 * i)));
}

}  // namespace

// SipHash-2-4 (Aumasson & Bernstein), byte order fixed to little-endian so a hash does not depend
// on the host.
uint64_t PrefixHasher::bytes_hash(std::span<const uint8_t> in) const {
  SipState s{k0_ ^ 0x736f6d6570736575ull, k1_ ^ 0x646f72616e646f6dull, k0_ ^ 0x6c7967656e657261ull,
             k1_ ^ 0x7465646279746573ull};
  const size_t full = in.size() / 8 * 8;
  for (size_t i = 0; i < full; i += 8) s.absorb(load_le64(in.data() + i));
  uint64_t last = uint64_t(in.size() & 0xff) << 56;
  for (size_t i = full; i < in.size(); ++i) last |= uint64_t(in[i]) << (8 * (i - full));
  s.absorb(last);
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

PrefixHasher::PrefixHasher(uint64_t key0, uint64_t key1, std::string_view model_identity)
    : k0_(key0), k1_(key1) {
  std::vector<uint8_t> bytes(model_identity.begin(), model_identity.end());
  seed_ = bytes_hash(bytes);
}

PrefixHasher PrefixHasher::with_random_key(std::string_view model_identity) {
  std::random_device rd;
  const uint64_t k0 = (uint64_t(rd()) << 32) ^ rd();
  const uint64_t k1 = (uint64_t(rd()) << 32) ^ rd();
  return PrefixHasher(k0, k1, model_identity);
}

uint64_t PrefixHasher::page_hash(uint64_t parent, std::span<const int32_t> tokens) const {
  std::vector<uint8_t> bytes;  // [8 + 4 * tokens] parent hash, then the ids, little-endian
  bytes.reserve(8 + 4 * tokens.size());
  append_le(bytes, parent, 8);
  for (int32_t t : tokens) append_le(bytes, uint32_t(t), 4);
  return bytes_hash(bytes);
}

void PrefixHasher::extend(std::span<const int32_t> tokens, int32_t page_size,
                          std::vector<uint64_t>& hashes) const {
  TANDEM_CHECK(page_size >= 1);
  const size_t full = tokens.size() / size_t(page_size);
  TANDEM_CHECK(hashes.size() <= full, "%zu page hashes for %zu full pages", hashes.size(), full);
  while (hashes.size() < full) {
    const size_t p = hashes.size();
    const uint64_t parent = p == 0 ? seed_ : hashes[p - 1];
    hashes.push_back(page_hash(parent, tokens.subspan(p * size_t(page_size), size_t(page_size))));
  }
}

}  // namespace tandem
