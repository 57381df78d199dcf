// Prefix caching as the stages use it: a sequence's page hash chain (kept on the Sequence,
// extended as tokens arrive), matching a new or resumed sequence's leading pages against a pool,
// and registering pages once their K/V is written. The pool does the reference counting and
// eviction (kv/page_pool.h); docs/prefix-caching.md tells the whole story.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "engine/sequence.h"
#include "kv/page_pool.h"
#include "kv/prefix_hash.h"
#include "model/model_dir.h"

namespace tandem {

// What makes one model's KV for a token sequence differ from another's: it seeds every hash
// chain, so pages of different models (or dtypes) can never match.
std::string kv_identity(const ModelDir& model);

class PrefixCache {
 public:
  PrefixCache(PrefixHasher hasher, int32_t page_size) : hasher_(hasher), page_size_(page_size) {}

  // The hashes of every full page of seq.tokens.
  std::span<const uint64_t> hashes(Sequence& seq) const;

  // On an empty table: shares the longest cached run of the sequence's leading full pages, but
  // never its last token (its logits are needed, so it is always computed). Returns the tokens
  // those pages hold.
  int64_t match(Sequence& seq, BlockTable& table, PagePool& pool) const;

  // Registers the table's full pages among the first `computed` tokens of seq.
  void commit(Sequence& seq, BlockTable& table, PagePool& pool, int64_t computed) const;

  int32_t page_size() const { return page_size_; }

 private:
  PrefixHasher hasher_;
  int32_t page_size_;
};

}  // namespace tandem
