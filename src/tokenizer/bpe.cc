#include "tokenizer/bpe.h"

#include <queue>

namespace tandem::tokenizer {
namespace {

constexpr size_t kCacheMaxEntries = 1 << 16;
constexpr size_t kCacheMaxPieceBytes = 256;  // long pieces are rare; do not let them fill it

struct Symbol {
  int32_t id;
  int32_t prev;  // index of the previous live symbol, -1 at the start
  int32_t next;  // index of the next live symbol, -1 at the end
  bool live;
};

struct Candidate {
  int32_t rank;
  int32_t pos;  // index of the left symbol
  int32_t merged_id;
  // std::priority_queue pops the largest: make the lowest rank, then the leftmost, the largest.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

BpeModel::BpeModel(std::vector<int32_t> byte_ids, std::unordered_map<uint64_t, MergeResult> merges,
                   std::unordered_map<std::string, int32_t> whole_piece_ids, bool ignore_merges)
    : byte_ids_(std::move(byte_ids)),
      merges_(std::move(merges)),
      piece_ids_(std::move(whole_piece_ids)),
      ignore_merges_(ignore_merges) {}

BpeModel::BpeModel(BpeModel&& o) noexcept
    : byte_ids_(std::move(o.byte_ids_)),
      merges_(std::move(o.merges_)),
      piece_ids_(std::move(o.piece_ids_)),
      ignore_merges_(o.ignore_merges_),
      cache_(std::move(o.cache_)) {}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    int32_t id = byte_ids_[uint8_t(piece[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  bool cacheable = piece.size() <= kCacheMaxPieceBytes;
  std::string key;
  if (cacheable) {
    key.assign(piece);
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t start = out.size();
  auto whole =
      ignore_merges_ ? piece_ids_.find(cacheable ? key : std::string(piece)) : piece_ids_.end();
  if (whole != piece_ids_.end()) {
    out.push_back(whole->second);  // ignore_merges: a piece in the vocabulary is one token
  } else {
    merge(piece, out);
  }
  if (cacheable) {
    std::vector<int32_t> ids(out.begin() + std::ptrdiff_t(start), out.end());
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheMaxEntries) cache_.clear();
    cache_.emplace(std::move(key), std::move(ids));
  }
}

// HF's Word::merge_all: a heap of candidate pairs, lowest rank first and leftmost on ties;
// entries made stale by an earlier merge are skipped when popped.
void BpeModel::merge(std::string_view piece, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols;  // [piece bytes] linked list over the live symbols
  symbols.reserve(piece.size());
  for (char c : piece) {
    int32_t id = byte_ids_[uint8_t(c)];
    if (id < 0) continue;
    int32_t idx = int32_t(symbols.size());
    symbols.push_back({id, idx - 1, -1, true});
    if (idx > 0) symbols[size_t(idx - 1)].next = idx;
  }
  std::priority_queue<Candidate> heap;
  auto push_pair = [&](int32_t left) {
    int32_t right = symbols[size_t(left)].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(symbols[size_t(left)].id, symbols[size_t(right)].id));
    if (it != merges_.end()) heap.push({it->second.rank, left, it->second.merged_id});
  };
  for (int32_t i = 0; i + 1 < int32_t(symbols.size()); ++i) push_pair(i);
  while (!heap.empty()) {
    Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[size_t(top.pos)];
    if (!left.live || left.next < 0) continue;
    Symbol& right = symbols[size_t(left.next)];
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.merged_id != top.merged_id) continue;  // stale
    left.id = top.merged_id;
    right.live = false;
    left.next = right.next;
    if (right.next >= 0) symbols[size_t(right.next)].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[size_t(i)].next) {
    out.push_back(symbols[size_t(i)].id);
  }
}

}  // namespace tandem::tokenizer
