// What both engines hold alike: the options, the model a request is checked and rendered against
// (config, generation defaults, tokenizer, chat template), the limits derived from them, and the
// telemetry. LocalEngine (one device) and DisaggregatedEngine (two stages) differ only in how
// they run requests.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "engine/engine.h"
#include "engine/spec_decoder.h"
#include "engine/step.h"
#include "model/model_dir.h"
#include "tokenizer/tokenizer.h"

namespace tandem {

class EngineBase : public Engine {
 public:
  std::string metrics_text() const final { return telemetry_.metrics_text(status()); }
  std::string trace_json(std::optional<uint64_t> request_id, size_t last_n) const final {
    return telemetry_.trace_json(request_id, last_n);
  }
  void add_trace_spans(uint64_t request_id, const std::vector<Span>& spans) final {
    telemetry_.add_spans(request_id, spans);
  }

  const Tokenizer& tokenizer() const final { return tokenizer_; }
  const ChatTemplate* chat_template() const final {
    return chat_template_ ? &*chat_template_ : nullptr;
  }
  const ModelConfig& model_config() const final { return model_.config; }
  const GenerationDefaults& generation_defaults() const final { return model_.generation; }

 protected:
  // `draft` is the draft model the derived engine is about to take, if any: its vocabulary
  // bounds valid_vocab_ too.
  EngineBase(const EngineOptions& options, ModelDir model, Tokenizer tokenizer,
             std::optional<ChatTemplate> chat_template, const std::optional<DraftModel>& draft);

  // The spec decoder's settings: the draft's, within this engine's context limit, with async
  // rounds when --async-decode is on.
  SpecConfig spec_config(const DraftModel& draft) const;

  // One KV pool's line of status(): `used` pages referenced by requests, `cached` free ones
  // holding a cached prefix. page_bytes is the runner's own page size (K and V, all layers), not
  // its pool's measured allocation over its pages (the CUDA runner's includes rounding).
  static PoolStatus pool_status(const char* name, const ModelRunner& runner, int32_t used,
                                int32_t cached);

  EngineOptions options_;
  ModelDir model_;
  Tokenizer tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  int32_t max_model_len_ = 0;  // --max-model-len, else the model's max_position_embeddings
  // The ids every model can produce and the tokenizer knows: what sampling ranges over.
  int32_t valid_vocab_ = 0;
  // Of them, those the draft scores and proposes (--draft-vocab; valid_vocab_ without a cap).
  // The spec decoder still compares rows of valid_vocab_ ids: the draft's are 0 past the cap.
  int32_t draft_vocab_ = 0;
  mutable Telemetry telemetry_;
};

}  // namespace tandem
