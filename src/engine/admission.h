// Validation of a new request and the Sequence it becomes; every engine admits the same way.
#pragma once

#include <memory>

#include "engine/engine.h"
#include "engine/sequence.h"
#include "model/model_dir.h"

namespace tandem {

struct AdmissionLimits {
  int32_t max_model_len = 0;
  int32_t page_size = 16;
  int32_t pool_pages = 0;  // the smallest pool the request must fit in, whole
};

// Errors: empty prompt, ids outside the vocabulary, bad sampling settings, prompt + max_tokens
// over max_model_len (vLLM's message), more pages than a pool has in all.
Result<std::unique_ptr<Sequence>> new_sequence(uint64_t request_id, GenerateInput input,
                                               EngineObserver* observer, const ModelDir& model,
                                               const Tokenizer& tokenizer,
                                               const AdmissionLimits& limits);

// An admitted sequence's engine settings: traced or not, and with a draft model its speculative
// state (the draft's random stream, derived from the request's so a seed fixes both).
void set_up_sequence(Sequence& seq, bool trace, bool speculative);

// Whether a submit is refused, checked under the engine's lock: the engine is stopping, the
// request id is already in flight, or `queued` requests wait at the `max_queue` limit.
Status check_submit(bool stopping, bool in_flight, int64_t queued, int32_t max_queue,
                    uint64_t request_id);

}  // namespace tandem
