#include "engine/engine.h"

#include <cstdio>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "engine/disaggregated_engine.h"
#include "engine/local_engine.h"
#include "engine/scheduling_policy.h"
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

namespace {

Error out_of_range(const std::string& flag, const std::string& value, const std::string& range) {
  return make_error(ErrorCode::kInvalidArgument, flag + " " + value + ": must be " + range);
}

// The draft runs on the decode device with its own KV pool; its tokenizer must be the target's
// (same ids for the same bytes). Embedding rows may differ (Qwen2.5-0.5B pads to 151,936 rows,
// Qwen2.5-7B to 152,064): sampling is limited to the ids both models and the tokenizer know.
Result<DraftModel> load_draft(const EngineOptions& options, const RunnerOptions& target_ro,
                              const Tokenizer& target_tokenizer) {
  DraftModel d;  // --draft-min / --draft-max: checked with the other limits (check_limits)
  TANDEM_ASSIGN_OR_RETURN(ModelDir dm, load_model_dir(options.draft_dir));
  TANDEM_TRY(
      load_time_quantization(options.draft_quantization, dm.config.quant, "--draft-quantization"));
  d.model = std::make_unique<ModelDir>(std::move(dm));
  TANDEM_ASSIGN_OR_RETURN(Tokenizer dt, Tokenizer::load(options.draft_dir));
  if (dt.vocab_size() != target_tokenizer.vocab_size()) {
    return make_error(ErrorCode::kInvalidModel,
                      "--draft " + options.draft_dir + ": its tokenizer has " +
                          std::to_string(dt.vocab_size()) + " tokens, the target's " +
                          std::to_string(target_tokenizer.vocab_size()) +
                          "; a draft must share the target's vocabulary");
  }
  for (int32_t id = 0; id < dt.vocab_size(); ++id) {
    if (dt.token_bytes(id) != target_tokenizer.token_bytes(id)) {
      return make_error(ErrorCode::kInvalidModel,
                        "--draft " + options.draft_dir + ": token " + std::to_string(id) +
                            " differs from the target's; a draft must share the target's "
                            "vocabulary");
    }
  }
  const int64_t known = std::min<int64_t>(dt.vocab_size(), d.model->config.vocab_size);
  if (options.draft_vocab > known) {
    return out_of_range("--draft-vocab", std::to_string(options.draft_vocab),
                        "between 1 and " + std::to_string(known) +
                            " (the ids the draft and its tokenizer know; 0 = all)");
  }
  TANDEM_ASSIGN_OR_RETURN(d.runner, make_runner(*d.model, target_ro));
  d.pool = std::make_unique<PagePool>(d.runner->num_pages());
  d.config.enabled = options.spec;
  d.config.draft_max = options.draft_max;
  d.config.draft_min = options.draft_min;
  // No batch holds more than --max-num-seqs sequences: the same limit, and the one the decode
  // runners' probability rows are reserved for (Engine::create).
  d.config.max_batch = std::min(options.spec_max_batch, options.max_num_seqs);
  d.config.max_forward_tokens = target_ro.max_batch_tokens;
  return d;
}

// What a configuration may ask, checked before anything loads so that each error names its flag.
// The upper bounds keep the sizes derived from them (logit and probability rows: sequences x
// (draft_max + 1)) inside int32; a speculative step is O(draft_max^2) in the policy's search,
// and acceptance over 32 proposals in a row is vanishingly rare. Unchecked, --draft-max 2e9 hung
// the first step, and --gpu-memory-utilization 5 made the KV pool larger than the GPU.
Status check_limits(const EngineOptions& o) {
  if (o.page_size < 1) return out_of_range("--page-size", std::to_string(o.page_size), ">= 1");
  if (o.kv_pages < 0) {
    return out_of_range("--kv-pages", std::to_string(o.kv_pages), ">= 0 (0 = size from memory)");
  }
  if (!(o.gpu_memory_utilization > 0.0 && o.gpu_memory_utilization <= 1.0)) {
    char value[32];
    std::snprintf(value, sizeof value, "%g", o.gpu_memory_utilization);
    return out_of_range("--gpu-memory-utilization", value, "in (0, 1]");
  }
  if (o.prefill_chunk < 1 || o.max_num_batched_tokens < 1 || o.max_num_seqs < 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--prefill-chunk, --max-num-batched-tokens and --max-num-seqs must be >= 1");
  }
  if (o.max_num_seqs > kMaxNumSeqs) {
    return out_of_range("--max-num-seqs", std::to_string(o.max_num_seqs),
                        "between 1 and " + std::to_string(kMaxNumSeqs));
  }
  if (o.max_cuda_graphs < 1) {
    return out_of_range("--max-cuda-graphs", std::to_string(o.max_cuda_graphs), ">= 1");
  }
  if (o.max_queue < 1) {  // 0 refused every request as "the request queue is full"
    return out_of_range("--max-queue", std::to_string(o.max_queue), ">= 1");
  }
  if (o.spec_max_batch < 0) {
    return out_of_range("--spec-max-batch", std::to_string(o.spec_max_batch),
                        ">= 0 (0 = never speculate)");
  }
  if (o.draft_max < 1 || o.draft_min < 1 || o.draft_min > o.draft_max) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--draft-min and --draft-max must satisfy 1 <= min <= max");
  }
  if (o.draft_vocab < 0) {  // the upper bound is the draft's vocabulary (load_draft)
    return out_of_range("--draft-vocab", std::to_string(o.draft_vocab), ">= 0 (0 = all ids)");
  }
  if (o.draft_max > kMaxDraftTokens) {
    return out_of_range("--draft-max", std::to_string(o.draft_max),
                        "between 1 and " + std::to_string(kMaxDraftTokens));
  }
  return Status::Ok();
}

Result<std::unique_ptr<Engine>> create_engine(const EngineOptions& options) {
  TANDEM_TRY(check_limits(options));
  if (auto policy = make_scheduling_policy(options.scheduling_policy); !policy) {
    return policy.error();
  }
  TANDEM_ASSIGN_OR_RETURN(ModelDir model, load_model_dir(options.model_dir));
  // Checked here so the message names the flag; the runners apply it.
  TANDEM_TRY(load_time_quantization(options.quantization, model.config.quant, "--quantization"));
  if (options.max_model_len < 0 || options.max_model_len > model.config.max_position_embeddings) {
    return make_error(ErrorCode::kInvalidArgument,
                      "max_model_len " + std::to_string(options.max_model_len) +
                          " is outside 0 (the model's) .. the model's max_position_embeddings " +
                          std::to_string(model.config.max_position_embeddings));
  }
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
  ro.device_timing = options.trace;
  ro.device = options.decode_device;
  ro.quantization = options.quantization;
  ro.max_graphs = options.max_cuda_graphs;
  RunnerOptions target_ro = ro;
  // One device runs colocated (nothing shipped) unless a GPU transport is named: then two
  // runners share the device (tests of the shipping path on one GPU), each with half the memory.
  const bool same_device = options.prefill_device == options.decode_device;
  const bool colocated =
      same_device && (options.kv_transport == "auto" || options.kv_transport == "local");
  if (same_device && !colocated) target_ro.gpu_memory_utilization /= 2;
  if (!options.draft_dir.empty() && options.kv_pages == 0) {
    // A GPU runner sizes its KV pool from what is free up to gpu_memory_utilization; the target
    // comes first and would leave the draft nothing. It stops at 85% of the share instead, and
    // the draft (weights + its own pool) fills the rest: a 0.5B draft's KV is 12 KiB/token
    // against the 7B target's 56 KiB, so both pools then hold about the same number of tokens.
    target_ro.gpu_memory_utilization = ro.gpu_memory_utilization * 0.85;
  }
  if (!options.draft_dir.empty()) {
    // Verification keeps k + 1 logit rows per speculating sequence.
    target_ro.max_logit_rows =
        std::max(4 * options.max_num_seqs,
                 std::min(options.max_num_seqs, options.spec_max_batch) * (options.draft_max + 1));
  }
  // The decode stage's probability rows for sampled speculation (SpecDecoder): k + 1 a
  // speculating sequence on the target, at least one a sequence (a seeded batch above
  // --spec-max-batch speculates with k = 0), and k on the draft.
  const int32_t spec_seqs = std::min(options.max_num_seqs, options.spec_max_batch);
  RunnerOptions draft_ro = ro;
  if (!options.draft_dir.empty() && options.spec) {
    target_ro.prob_rows = std::max(options.max_num_seqs, spec_seqs * (options.draft_max + 1));
    draft_ro.prob_rows = spec_seqs * options.draft_max;
  }
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> decode_runner,
                          make_runner(model, target_ro));
  std::optional<DraftModel> draft;
  // The draft is quantized (or not) independently of the target.
  draft_ro.quantization = options.draft_quantization;
  if (!options.draft_dir.empty()) {
    TANDEM_ASSIGN_OR_RETURN(DraftModel d, load_draft(options, draft_ro, tokenizer));
    draft = std::move(d);
  }
  if (colocated) {
    return std::unique_ptr<Engine>(new LocalEngine(options, std::move(model), std::move(tokenizer),
                                                   std::move(chat_template),
                                                   std::move(decode_runner), std::move(draft)));
  }
  // Two stages. The ModelDir (its mmap) outlives both runners: it moves into the engine, and a
  // moved WeightStore keeps its tensors where they are. With a draft, the prefill stage runs it
  // too (its prompt KV ships with the target's), sharing the draft's ModelDir, and the prefill
  // device's memory is split between the two models as on the decode device.
  ro.device = options.prefill_device;
  target_ro.device = options.prefill_device;
  draft_ro.device = options.prefill_device;
  target_ro.prob_rows = draft_ro.prob_rows = 0;  // the prefill stage samples no speculation
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> prefill_runner,
                          make_runner(model, draft ? target_ro : ro));
  std::unique_ptr<ModelRunner> prefill_draft_runner;
  if (draft) {
    TANDEM_ASSIGN_OR_RETURN(prefill_draft_runner, make_runner(*draft->model, draft_ro));
  }
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<KvTransport> transport,
                          make_transport(options.kv_transport, prefill_runner->kv_pool_view(),
                                         decode_runner->kv_pool_view()));
  return std::unique_ptr<Engine>(new DisaggregatedEngine(
      options, std::move(model), std::move(tokenizer), std::move(chat_template),
      std::move(prefill_runner), std::move(decode_runner), std::move(transport), std::move(draft),
      std::move(prefill_draft_runner)));
}

// Loading frees more than it keeps: tokenizer.json's parsed document and a draft's tokenizer,
// read only to compare vocabularies. glibc keeps freed heap in the process,
// where it stays resident for the daemon's lifetime: tandemd on a tiny Qwen model held 240 MiB
// resident (281 with a draft), 201 after a trim (NOTES v44); give it back.
void release_free_heap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineOptions& options) {
  auto engine = create_engine(options);
  release_free_heap();
  return engine;
}

}  // namespace tandem
