#include "sampling/stop_checker.h"

#include <algorithm>

#include "core/check.h"

namespace tandem {

StopChecker::StopChecker(const ResolvedSampling& params)
    : stop_(params.stop), min_tokens_(params.min_tokens), max_tokens_(params.max_tokens) {
  if (!params.ignore_eos) stop_ids_ = params.eos_token_ids;
  stop_ids_.insert(stop_ids_.end(), params.stop_token_ids.begin(), params.stop_token_ids.end());
  for (const std::string& s : stop_) TANDEM_CHECK(!s.empty(), "empty stop string");
}

StopChecker::Verdict StopChecker::push(int32_t token, std::string_view piece, int32_t output_len) {
  TANDEM_CHECK(!finished_, "token %d pushed after the request finished", token);
  Verdict v;
  // As in vLLM v1, max_tokens is checked before eos/stop ids: the last allowed token finishes
  // with "length" even when it is eos.
  const bool at_length = output_len >= max_tokens_;
  const bool checks_on = output_len >= min_tokens_;

  if (!at_length && checks_on &&
      std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end()) {
    // The stop token's own text is dropped; what was held back is plain text now.
    finished_ = true;
    v.finished = FinishReason::kStop;
    v.text = std::move(held_);
    held_.clear();
    return v;
  }

  const size_t old_len = held_.size();
  held_.append(piece);
  if (checks_on && !stop_.empty()) {
    // A match must end inside the new piece: earlier ones were checked (or were before
    // min_tokens). Held text is the only earlier text a new match can start in (see
    // hold_back_length), so searching held_ suffices; the earliest match wins.
    size_t best = std::string::npos;
    const std::string* best_stop = nullptr;
    for (const std::string& s : stop_) {
      const size_t from = old_len + 1 > s.size() ? old_len + 1 - s.size() : 0;
      const size_t at = held_.find(s, from);
      if (at != std::string::npos && at < best) {
        best = at;
        best_stop = &s;
      }
    }
    if (best_stop) {
      finished_ = true;
      matched_stop_ = *best_stop;
      v.finished = FinishReason::kStop;
      v.text = held_.substr(0, best);
      held_.clear();
      return v;
    }
  }
  if (at_length) {
    finished_ = true;
    v.finished = FinishReason::kLength;
    v.text = std::move(held_);
    held_.clear();
    return v;
  }
  const size_t keep = hold_back_length();
  v.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return v;
}

size_t StopChecker::hold_back_length() const {
  size_t keep = 0;
  for (const std::string& s : stop_) {
    // Suffixes of held_ longer than `keep` that are proper prefixes of s.
    const size_t longest = std::min(s.size() - 1, held_.size());
    for (size_t n = longest; n > keep; --n) {
      if (std::string_view(held_).substr(held_.size() - n) == std::string_view(s).substr(0, n)) {
        keep = n;
        break;
      }
    }
  }
  return keep;
}

std::string StopChecker::flush(std::string_view tail) {
  if (matched_stop_) return {};
  std::string out = std::move(held_);
  held_.clear();
  out.append(tail);
  return out;
}

}  // namespace tandem
