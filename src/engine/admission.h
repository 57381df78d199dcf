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

}  // namespace tandem
