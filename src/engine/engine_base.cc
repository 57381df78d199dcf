#include "engine/engine_base.h"

#include <algorithm>
#include <cstdint>

namespace tandem {

EngineBase::EngineBase(const EngineOptions& options, ModelDir model, Tokenizer tokenizer,
                       std::optional<ChatTemplate> chat_template,
                       const std::optional<DraftModel>& draft)
    : options_(options),
      model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      chat_template_(std::move(chat_template)) {
  max_model_len_ =
      options.max_model_len > 0
          ? options.max_model_len
          : int32_t(std::min<int64_t>(model_.config.max_position_embeddings, INT32_MAX));
  valid_vocab_ = int32_t(std::min<int64_t>(model_.config.vocab_size, tokenizer_.vocab_size()));
  // Both models sample over the ids both can produce and the tokenizer knows.
  if (draft) {
    valid_vocab_ = int32_t(std::min<int64_t>(valid_vocab_, draft->model->config.vocab_size));
  }
  draft_vocab_ =
      draft && options.draft_vocab > 0 ? std::min(valid_vocab_, options.draft_vocab) : valid_vocab_;
}

PoolStatus EngineBase::pool_status(const char* name, const ModelRunner& runner, int32_t used,
                                   int32_t cached) {
  PoolStatus p;
  p.name = name;
  p.device = runner.device();
  p.page_size = runner.page_size();
  p.total_pages = runner.num_pages();
  p.used_pages = used;
  p.cached_pages = cached;
  p.page_bytes = runner.memory_plan().kv_page_bytes;
  return p;
}

SpecConfig EngineBase::spec_config(const DraftModel& draft) const {
  SpecConfig config = draft.config;
  config.max_model_len = max_model_len_;
  config.async_rounds = options_.async_decode;
  return config;
}

}  // namespace tandem
