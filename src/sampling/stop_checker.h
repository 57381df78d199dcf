// When a request is done, and how much of its text may be streamed. One per request, fed every
// emitted token and its detokenized piece. vLLM's rules: nothing stops a request before
// min_tokens except max_tokens; an eos or stop id finishes it with its own text dropped (the id
// stays in token_ids); a stop string finishes it with the text cut before the string, even when
// the string spans several tokens. Text that could be the start of a stop string is held back
// until it is known not to be, so streamed text never has to be taken back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/events.h"  // FinishReason (a header-only enum)
#include "sampling/sampling_params.h"

namespace tandem {

class StopChecker {
 public:
  struct Verdict {
    std::optional<FinishReason> finished;  // set once: the request is done
    std::string text;                      // text that may be streamed now
  };

  explicit StopChecker(const ResolvedSampling& params);

  // `piece`: the text the detokenizer produced for `token`; `output_len`: output tokens so far,
  // counting `token`. Must not be called after a verdict that finished.
  Verdict push(int32_t token, std::string_view piece, int32_t output_len);

  // At the end of the request (any reason): the held-back text plus the detokenizer's last
  // `tail`, or nothing after a stop string (what follows it is never output).
  std::string flush(std::string_view tail);

  // Bytes held back now because they may begin a stop string.
  size_t held_bytes() const { return held_.size(); }
  // The stop string that finished the request, if one did.
  const std::optional<std::string>& matched_stop() const { return matched_stop_; }

 private:
  // Longest suffix of held_ that is a proper prefix of some stop string.
  size_t hold_back_length() const;

  std::vector<std::string> stop_;
  std::vector<int32_t> stop_ids_;  // eos ids (unless ignore_eos) then stop_token_ids
  int32_t min_tokens_ = 0;
  int32_t max_tokens_ = 0;
  std::string held_;  // text not yet streamed
  bool finished_ = false;
  std::optional<std::string> matched_stop_;
};

}  // namespace tandem
