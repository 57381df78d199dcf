// What the engine reports about a request: token events while it runs, one finish event at the
// end. Delivered on the engine's worker thread; observers hand them on (the daemon through a
// uv_async_t) and must not block.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace tandem {

enum class FinishReason { kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
};

// Milliseconds, measured with a monotonic clock from the request's arrival.
struct RequestTimings {
  double queue_ms = 0;    // arrival -> first prefill chunk starts
  double prefill_ms = 0;  // first chunk start -> last chunk end (all chunks, both models)
  double kv_ship_ms = 0;  // exposed KV transfer time after the last chunk
  double ttft_ms = 0;     // arrival -> first token emitted
  double decode_ms = 0;   // first token -> last token
  double tpot_ms = 0;     // decode_ms / (completion_tokens - 1), 0 when < 2 tokens
  double e2e_ms = 0;      // arrival -> finish
  int32_t prefill_chunks = 0;
  int32_t decode_steps = 0;  // steps that emitted tokens after the first (a speculative step: 1)
};

struct SpecStats {
  int64_t drafts = 0;  // speculative steps: steps that proposed at least one draft token
  int64_t proposed = 0;
  int64_t accepted = 0;
  std::vector<int64_t> accepted_per_position;  // [draft_max]
  double acceptance_rate() const { return proposed ? double(accepted) / double(proposed) : 0.0; }
  // Tokens a speculative step emitted on average: its accepted drafts plus the target's own
  // token (vLLM's "mean acceptance length"); 0 before any.
  double mean_accepted_length() const {
    return drafts ? 1.0 + double(accepted) / double(drafts) : 0.0;
  }
};

struct TokenEvent {
  uint64_t request_id = 0;
  std::vector<int32_t> ids;  // new tokens since the last event
  std::string text;          // text that became final with them (may be empty)
};

struct FinishEvent {
  uint64_t request_id = 0;
  FinishReason reason = FinishReason::kStop;
  std::optional<Error> error;  // set when reason == kError
  Usage usage;
  RequestTimings timings;
  std::optional<SpecStats> spec;  // set when a draft model ran
  std::string text_tail;          // final text not yet in a TokenEvent
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void on_tokens(TokenEvent event) = 0;
  // Last call for this request; the observer may be destroyed after it returns.
  virtual void on_finished(FinishEvent event) = 0;
};

}  // namespace tandem
