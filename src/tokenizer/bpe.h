// Byte-level BPE: merges a pre-tokenized piece (raw bytes) into vocabulary ids by merge rank,
// exactly as HF `tokenizers`' BPE model does (lowest rank first, leftmost on ties).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem::tokenizer {

struct MergeResult {
  int32_t rank;
  int32_t merged_id;
};

class BpeModel {
 public:
  // byte_ids: [256] id of each single byte's token, -1 when the vocabulary lacks it (the byte is
  // then dropped, as HF does without an unk token). whole_piece_ids: vocabulary keyed by raw
  // bytes, consulted first when ignore_merges is set.
  BpeModel(std::vector<int32_t> byte_ids, std::unordered_map<uint64_t, MergeResult> merges,
           std::unordered_map<std::string, int32_t> whole_piece_ids, bool ignore_merges);
  BpeModel(BpeModel&&) noexcept;

  static uint64_t pair_key(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }

  // Appends the ids of one piece to `out`. Thread-safe: the word cache has its own lock.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  void merge(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<int32_t> byte_ids_;                       // [256]
  std::unordered_map<uint64_t, MergeResult> merges_;    // (left id, right id) -> merge
  std::unordered_map<std::string, int32_t> piece_ids_;  // raw bytes -> id (ignore_merges)
  bool ignore_merges_;

  // Pieces repeat a lot (" the", "    "); caching their ids skips the merge loop. Bounded: it is
  // cleared when full rather than tracking recency.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace tandem::tokenizer
