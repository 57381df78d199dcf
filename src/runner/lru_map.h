// A map that keeps at most `capacity` entries, evicting the least recently used one to make room.
// The CUDA runner keeps its captured graphs in one: a graph is keyed by its batch shape, and a
// long-running server meets ever more shapes (batch sizes, attention slice counts, logit rows),
// each holding the driver's memory for as long as it is kept. Lookups are O(log n); an eviction
// scans the entries (it happens beside a graph capture, which costs milliseconds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>

#include "core/check.h"

namespace tandem {

template <typename Key, typename Value>
class LruMap {
 public:
  explicit LruMap(size_t capacity) : capacity_(capacity) {
    TANDEM_CHECK(capacity >= 1, "an LRU map holds at least one entry");
  }

  // The value under `key`, now the most recently used; null when absent.
  Value* find(const Key& key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    it->second.last_use = ++tick_;
    return &it->second.value;
  }

  // Adds `key` (absent) as the most recently used. When the map is full, the least recently used
  // entry leaves first and is returned, for its owner to release.
  std::optional<std::pair<Key, Value>> insert(const Key& key, Value value) {
    TANDEM_CHECK(entries_.find(key) == entries_.end(), "the key is already held");
    std::optional<std::pair<Key, Value>> evicted;
    if (entries_.size() >= capacity_) {
      auto oldest = entries_.begin();
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->second.last_use < oldest->second.last_use) oldest = it;
      }
      evicted.emplace(oldest->first, std::move(oldest->second.value));
      entries_.erase(oldest);
      ++evictions_;
    }
    entries_.emplace(key, Entry{std::move(value), ++tick_});
    return evicted;
  }

  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }
  int64_t evictions() const { return evictions_; }

  // f(key, value) for every entry (to release them all).
  template <typename F>
  void for_each(F&& f) {
    for (auto& [key, entry] : entries_) f(key, entry.value);
  }

 private:
  struct Entry {
    Value value;
    uint64_t last_use = 0;
  };
  size_t capacity_;
  uint64_t tick_ = 0;
  int64_t evictions_ = 0;
  std::map<Key, Entry> entries_;
};

}  // namespace tandem
