#include "engine/prefix_cache.h"

#include "core/dtype.h"

namespace tandem {

std::string kv_identity(const ModelDir& model) {
  const ModelConfig& c = model.config;
  return model.path + "|" + c.architecture + "|" + std::string(dtype_name(c.dtype)) + "|" +
         std::to_string(c.num_layers) + "x" + std::to_string(c.num_kv_heads) + "x" +
         std::to_string(c.head_dim) + "|" + std::to_string(c.rope_theta);
}

std::span<const uint64_t> PrefixCache::hashes(Sequence& seq) const {
  hasher_.extend(seq.tokens, page_size_, seq.page_hashes);
  return seq.page_hashes;
}

int64_t PrefixCache::match(Sequence& seq, BlockTable& table, PagePool& pool) const {
  return table.match_prefix(pool, hashes(seq), int64_t(seq.tokens.size()) - 1, page_size_);
}

void PrefixCache::commit(Sequence& seq, BlockTable& table, PagePool& pool, int64_t computed) const {
  table.cache_full_pages(pool, hashes(seq), computed, page_size_);
}

}  // namespace tandem
