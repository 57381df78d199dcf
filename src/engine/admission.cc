#include "engine/admission.h"

#include <random>
#include <string>

namespace tandem {

Result<std::unique_ptr<Sequence>> new_sequence(uint64_t request_id, GenerateInput input,
                                               EngineObserver* observer, const ModelDir& model,
                                               const Tokenizer& tokenizer,
                                               const AdmissionLimits& limits) {
  const int64_t prompt_len = int64_t(input.prompt_ids.size());
  if (prompt_len == 0) return make_error(ErrorCode::kInvalidArgument, "the prompt is empty");
  for (int32_t id : input.prompt_ids) {
    if (id < 0 || id >= model.config.vocab_size) {
      return make_error(ErrorCode::kInvalidArgument, "prompt token id " + std::to_string(id) +
                                                         " is outside the model's vocabulary of " +
                                                         std::to_string(model.config.vocab_size));
    }
  }
  TANDEM_ASSIGN_OR_RETURN(
      ResolvedSampling params,
      resolve_sampling(input.sampling, model.generation, model.config.eos_token_ids));
  if (prompt_len + params.max_tokens > limits.max_model_len) {
    return make_error(
        ErrorCode::kPromptTooLong,
        "This model's maximum context length is " + std::to_string(limits.max_model_len) +
            " tokens. However, you requested " + std::to_string(prompt_len + params.max_tokens) +
            " tokens (" + std::to_string(prompt_len) + " in the messages, " +
            std::to_string(params.max_tokens) +
            " in the completion). Please reduce the length of the messages or completion.");
  }
  const int32_t need = pages_for_tokens(prompt_len + params.max_tokens, limits.page_size);
  if (need > limits.pool_pages) {
    return make_error(ErrorCode::kOutOfPages,
                      "the request needs " + std::to_string(need) + " KV pages but the pool has " +
                          std::to_string(limits.pool_pages) + " in all (--kv-pages)");
  }

  auto seq = std::make_unique<Sequence>();
  seq->id = request_id;
  seq->observer = observer;
  seq->tokens = std::move(input.prompt_ids);
  seq->prompt_len = int32_t(prompt_len);
  seq->params = std::move(params);
  if (seq->params.has_seed) {
    seq->rng.seed = seq->params.seed;
  } else {
    std::random_device rd;
    seq->rng.seed = (uint64_t(rd()) << 32) | rd();
  }
  seq->detok = std::make_unique<IncrementalDetokenizer>(tokenizer, seq->params.skip_special_tokens);
  seq->stop = std::make_unique<StopChecker>(seq->params);
  seq->arrival = Clock::now();
  return seq;
}

void set_up_sequence(Sequence& seq, bool trace, bool speculative) {
  seq.trace.enabled = trace;
  if (speculative) {
    seq.speculative = true;
    seq.draft_rng.seed = seq.rng.seed ^ 0x9e3779b97f4a7c15ull;
  }
}

Status check_submit(bool stopping, bool in_flight, int64_t queued, int32_t max_queue,
                    uint64_t request_id) {
  if (stopping) return make_error(ErrorCode::kOverloaded, "the server is shutting down");
  if (in_flight) {
    return make_error(ErrorCode::kInvalidArgument,
                      "request id " + std::to_string(request_id) + " is already in flight");
  }
  if (queued >= max_queue) {
    return make_error(
        ErrorCode::kOverloaded,
        "the request queue is full (" + std::to_string(max_queue) + " waiting); try again later");
  }
  return Status::Ok();
}

}  // namespace tandem
