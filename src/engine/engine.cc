#include "engine/engine.h"

#include "engine/disaggregated_engine.h"
#include "engine/local_engine.h"
#include "transport/make_transport.h"

namespace tandem {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

Result<std::unique_ptr<Engine>> Engine::create(const EngineOptions& options) {
  if (!options.draft_dir.empty()) {
    return make_error(ErrorCode::kUnsupported,
                      "--draft: speculative decoding is not available in this build yet");
  }
  if (options.prefill_device != options.decode_device) {
    return make_error(ErrorCode::kUnsupported,
                      "--prefill-device " + options.prefill_device +
                          " differs from --decode-device " + options.decode_device +
                          ": disaggregated stages are not available in this build yet; give "
                          "both the same device");
  }
  if (options.page_size < 1) {
    return make_error(ErrorCode::kInvalidArgument, "--page-size must be >= 1");
  }
  if (options.prefill_chunk < 1 || options.max_num_batched_tokens < 1 || options.max_num_seqs < 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--prefill-chunk, --max-num-batched-tokens and --max-num-seqs must be >= 1");
  }
  TANDEM_ASSIGN_OR_RETURN(ModelDir model, load_model_dir(options.model_dir));
  TANDEM_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::load(options.model_dir));
  std::optional<ChatTemplate> chat_template;
  if (!tokenizer.config().chat_template.empty()) {
    TANDEM_ASSIGN_OR_RETURN(ChatTemplate parsed,
                            ChatTemplate::parse(tokenizer.config().chat_template));
    chat_template = std::move(parsed);
  }
  RunnerOptions ro;
  ro.page_size = options.page_size;
  ro.num_pages = options.kv_pages;
  ro.gpu_memory_utilization = options.gpu_memory_utilization;
  ro.max_batch_tokens = options.max_num_batched_tokens;
  ro.max_seqs = options.max_num_seqs;
  ro.threads = options.threads;
  ro.device = options.decode_device;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> decode_runner, make_runner(model, ro));
  if (options.prefill_device == options.decode_device) {
    return std::unique_ptr<Engine>(new LocalEngine(options, std::move(model), std::move(tokenizer),
                                                   std::move(chat_template),
                                                   std::move(decode_runner)));
  }
  // Two stages. The ModelDir (its mmap) outlives both runners: it moves into the engine, and a
  // moved WeightStore keeps its tensors where they are.
  ro.device = options.prefill_device;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> prefill_runner, make_runner(model, ro));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<KvTransport> transport,
                          make_transport(options.kv_transport, prefill_runner->kv_pool_view(),
                                         decode_runner->kv_pool_view()));
  return std::unique_ptr<Engine>(new DisaggregatedEngine(
      options, std::move(model), std::move(tokenizer), std::move(chat_template),
      std::move(prefill_runner), std::move(decode_runner), std::move(transport)));
}

}  // namespace tandem
