#include "runner/cpu/cpu_runner.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "model/quant_tensors.h"
#include "runner/cpu/cpu_ops.h"
#include "runner/cpu/paged_attention.h"
#include "runner/cpu/rope.h"

namespace tandem {

namespace {

// Default KV budget when RunnerOptions::num_pages is 0.
constexpr int64_t kDefaultKvBytes = int64_t(2) << 30;

int64_t machine_memory_bytes() {
  return int64_t(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
}

void grow(std::vector<float>& v, int64_t n) {
  if (v.size() < size_t(n)) v.resize(size_t(n));
}

AttentionShape attention_shape(const ModelConfig& c, int32_t page_size) {
  return AttentionShape{c.num_heads, c.num_kv_heads, c.head_dim, page_size};
}

ModelConfig with_quant(ModelConfig c, const QuantConfig& quant) {
  c.quant = quant;
  return c;
}

}  // namespace

CpuRunner::CpuRunner(const ModelDir& model, const RunnerOptions& opts, int32_t num_pages,
                     const QuantConfig& quant)
    : config_(with_quant(model.config, quant)),
      weights_(model.tensors),
      device_(opts.device),
      page_size_(opts.page_size),
      num_pages_(num_pages),
      max_batch_tokens_(std::max(opts.max_batch_tokens, 1)),
      valid_vocab_(int32_t(model.config.vocab_size)),
      pool_(opts.threads),
      inv_freq_(rope_inv_freq(model.config)),
      page_floats_(size_t(opts.page_size * model.config.num_kv_heads * model.config.head_dim)) {
  num_pages_from_budget_ = opts.num_pages == 0;
  weight_bytes_by_format_ = weight_bytes_by_format(model.config, model.weights);
  if (quant.quantized() && !model.config.quant.quantized()) {
    // Load-time fp8: the float Linears stay mapped but are no longer read; count the copies.
    for (const LayerWeights& l : weights_.layers) {
      for (const TensorView* t :
           {l.q_proj, l.k_proj, l.v_proj, l.o_proj, l.gate_proj, l.up_proj, l.down_proj}) {
        std::string label(dtype_name(t->dtype));
        std::transform(label.begin(), label.end(), label.begin(), ::tolower);
        for (auto& [format, bytes] : weight_bytes_by_format_)
          if (format == label) bytes -= int64_t(t->nbytes);
      }
    }
    quantize_weights_fp8(quant, pool_, weights_, fp8_copy_);
    weight_bytes_by_format_.insert(weight_bytes_by_format_.begin(),
                                   {"fp8 e4m3 (quantized at load)", fp8_copy_.bytes});
  }
  for (const auto& [format, bytes] : weight_bytes_by_format_) weights_bytes_ += bytes;
  // Mapped, not filled: untouched pages cost no memory, and a page is always written before it
  // is read (the block table covers only written positions).
  const size_t pool_bytes = page_floats_ * size_t(num_pages) * sizeof(float);
  for (int64_t l = 0; l < model.config.num_layers; ++l) {
    k_pages_.emplace_back(pool_bytes);
    v_pages_.emplace_back(pool_bytes);
  }
}

void CpuRunner::set_valid_vocab(int32_t valid_vocab) {
  TANDEM_CHECK(valid_vocab > 0 && valid_vocab <= config_.vocab_size,
               "valid_vocab %d outside (0, %lld]", valid_vocab, (long long)config_.vocab_size);
  valid_vocab_ = valid_vocab;
}

MemoryPlan CpuRunner::memory_plan() const {
  MemoryPlan plan;
  plan.weights_bytes = weights_bytes_;
  plan.weight_bytes_by_format = weight_bytes_by_format_;
  plan.kv_bytes = int64_t(page_floats_) * 4 * 2 * num_pages_ * config_.num_layers;
  plan.kv_page_bytes = int64_t(page_floats_) * 4 * 2 * config_.num_layers;
  plan.kv_budget_bytes = num_pages_from_budget_ ? kDefaultKvBytes : 0;
  plan.activation_bytes = activation_bytes_.load(std::memory_order_relaxed);
  const int64_t page = sysconf(_SC_PAGESIZE);
  plan.device_total_bytes = machine_memory_bytes();
  plan.device_free_bytes = int64_t(sysconf(_SC_AVPHYS_PAGES)) * page;
  return plan;
}

// A malformed batch is a scheduler bug, never client input: checks, not Errors.
void CpuRunner::check_batch(const ForwardBatch& batch) const {
  const int64_t num_tokens = int64_t(batch.tokens.size());
  TANDEM_CHECK(num_tokens <= max_batch_tokens_, "batch of %lld tokens over the runner's %d",
               (long long)num_tokens, max_batch_tokens_);
  int64_t covered = 0;
  for (const SeqSlice& s : batch.seqs) {
    TANDEM_CHECK(s.q_len > 0 && s.q_start >= 0 && s.q_start + s.q_len <= num_tokens,
                 "slice [%d, +%d) outside the batch of %lld tokens", s.q_start, s.q_len,
                 (long long)num_tokens);
    TANDEM_CHECK(s.context_len >= s.q_len, "context_len %d < q_len %d", s.context_len, s.q_len);
    TANDEM_CHECK(int64_t(s.pages.size()) * page_size_ >= s.context_len,
                 "%zu pages cannot hold %d tokens", s.pages.size(), s.context_len);
    for (int32_t p : s.pages)
      TANDEM_CHECK(p >= 0 && p < num_pages_, "page id %d outside [0, %d)", p, num_pages_);
    covered += s.q_len;
  }
  TANDEM_CHECK(covered == num_tokens, "slices cover %lld of %lld tokens", (long long)covered,
               (long long)num_tokens);
  for (int32_t t : batch.tokens)
    TANDEM_CHECK(t >= 0 && t < config_.vocab_size, "token id %d outside the vocabulary", t);
  for (int32_t r : batch.logit_rows)
    TANDEM_CHECK(r >= 0 && r < num_tokens, "logit row %d outside the batch", r);
}

void CpuRunner::forward(const ForwardBatch& batch) {
  if (!batch.fed.empty()) {  // the fed ids are on the host already
    const std::vector<int32_t> tokens = fed_tokens(batch);
    ForwardBatch resolved = batch;
    resolved.tokens = tokens;
    resolved.fed = {};
    forward(resolved);
    return;
  }
  check_batch(batch);
  note_greedy_next(batch);
  const ModelConfig& c = config_;
  const int64_t n = int64_t(batch.tokens.size());
  const int64_t hidden = c.hidden_size;
  const int64_t q_width = c.num_heads * c.head_dim;
  const int64_t kv_width = c.num_kv_heads * c.head_dim;
  grow(x_, n * hidden);
  grow(h_, n * hidden);
  grow(q_, n * q_width);
  grow(k_, n * kv_width);
  grow(v_, n * kv_width);
  grow(attn_, n * q_width);
  grow(gate_, n * c.intermediate_size);
  grow(up_, n * c.intermediate_size);

  std::vector<int32_t> positions(static_cast<size_t>(n));  // [num_tokens] position of each token
  for (const SeqSlice& s : batch.seqs)
    for (int32_t i = 0; i < s.q_len; ++i)
      positions[size_t(s.q_start + i)] = s.context_len - s.q_len + i;

  for (int64_t t = 0; t < n; ++t)
    weight_row_to_f32(*weights_.embed_tokens, batch.tokens[size_t(t)], &x_[size_t(t * hidden)]);
  for (int64_t l = 0; l < c.num_layers; ++l) run_layer(l, batch, positions);

  // Final norm and lm_head only for the rows whose logits are wanted.
  num_logits_ = int64_t(batch.logit_rows.size());
  grow(logits_, num_logits_ * c.vocab_size);
  int64_t activation_bytes = 0;
  for (const auto* v : {&x_, &h_, &q_, &k_, &v_, &attn_, &gate_, &up_, &logits_})
    activation_bytes += int64_t(v->capacity() * sizeof(float));
  activation_bytes_.store(activation_bytes, std::memory_order_relaxed);
  std::vector<float> rows(static_cast<size_t>(num_logits_ * hidden));  // [num_logits, hidden]
  for (int64_t i = 0; i < num_logits_; ++i)
    std::copy_n(&x_[size_t(batch.logit_rows[size_t(i)] * hidden)], hidden,
                &rows[size_t(i * hidden)]);
  rms_norm(rows.data(), num_logits_, hidden, *weights_.final_norm, c.rms_norm_eps, rows.data());
  lm_head(rows.data());
}

void CpuRunner::lm_head(const float* rows) {
  const int64_t vocab = config_.vocab_size;
  const int64_t scored = valid_vocab_;
  if (scored == vocab) {
    linear(pool_, rows, num_logits_, *weights_.lm_head, nullptr, logits_.data());
    return;
  }
  // Only the ids the sampler may give are scored (the lm_head's first rows: a padded
  // vocabulary, or a draft's capped one); the others read -inf, as no sampler can pick them.
  TensorView head = *weights_.lm_head;
  head.shape[0] = scored;
  head.nbytes = size_t(scored) * size_t(head.shape[1]) * dtype_size(head.dtype);
  // The scores land packed ([num_logits, scored] at the front of logits_) and each row moves
  // to its place, last first: row i's place starts at i * vocab, past every earlier row's
  // packed scores, so no row is overwritten before it moves.
  linear(pool_, rows, num_logits_, head, nullptr, logits_.data());
  for (int64_t i = num_logits_ - 1; i >= 0; --i) {
    float* row = &logits_[size_t(i * vocab)];
    const float* packed = &logits_[size_t(i * scored)];
    if (i > 0) std::copy_backward(packed, packed + scored, row + scored);  // row 0 is in place
    std::fill(row + scored, row + vocab, -std::numeric_limits<float>::infinity());
  }
}

void CpuRunner::run_layer(int64_t layer, const ForwardBatch& batch,
                          const std::vector<int32_t>& positions) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[size_t(layer)];
  const int64_t n = int64_t(batch.tokens.size());
  const int64_t hidden = c.hidden_size;
  const int64_t q_width = c.num_heads * c.head_dim;
  const int64_t kv_width = c.num_kv_heads * c.head_dim;

  // Attention block: x += o_proj(attention(rope(q), rope(k), v)).
  rms_norm(x_.data(), n, hidden, *w.input_norm, c.rms_norm_eps, h_.data());
  linear(pool_, h_.data(), n, *w.q_proj, w.quant.q_proj, w.q_bias, q_.data());
  linear(pool_, h_.data(), n, *w.k_proj, w.quant.k_proj, w.k_bias, k_.data());
  linear(pool_, h_.data(), n, *w.v_proj, w.quant.v_proj, w.v_bias, v_.data());
  for (int64_t t = 0; t < n; ++t) {
    apply_rope(&q_[size_t(t * q_width)], c.num_heads, c.head_dim, positions[size_t(t)], inv_freq_);
    apply_rope(&k_[size_t(t * kv_width)], c.num_kv_heads, c.head_dim, positions[size_t(t)],
               inv_freq_);
  }
  const AttentionShape shape = attention_shape(c, page_size_);
  float* k_cache = k_pages_[size_t(layer)].as<float>();
  float* v_cache = v_pages_[size_t(layer)].as<float>();
  write_kv_pages(shape, batch.seqs, k_.data(), v_.data(), k_cache, v_cache);
  paged_attention(pool_, shape, batch.seqs, q_.data(), k_cache, v_cache, attn_.data());
  linear(pool_, attn_.data(), n, *w.o_proj, w.quant.o_proj, w.o_bias, h_.data());
  for (int64_t i = 0; i < n * hidden; ++i) x_[size_t(i)] += h_[size_t(i)];

  // MLP block: x += down(silu(gate(h)) * up(h)).
  rms_norm(x_.data(), n, hidden, *w.post_attn_norm, c.rms_norm_eps, h_.data());
  linear(pool_, h_.data(), n, *w.gate_proj, w.quant.gate_proj, w.gate_bias, gate_.data());
  linear(pool_, h_.data(), n, *w.up_proj, w.quant.up_proj, w.up_bias, up_.data());
  silu_mul(gate_.data(), up_.data(), n * c.intermediate_size, gate_.data());
  linear(pool_, gate_.data(), n, *w.down_proj, w.quant.down_proj, w.down_bias, h_.data());
  for (int64_t i = 0; i < n * hidden; ++i) x_[size_t(i)] += h_[size_t(i)];
}

void CpuRunner::sample(std::span<const SampleRequest> requests, std::span<int32_t> out_tokens) {
  TANDEM_CHECK(out_tokens.size() >= requests.size(), "%zu outputs for %zu requests",
               out_tokens.size(), requests.size());
  check_greedy_next(requests, false);  // the default sample_async() checked and cleared it
  const int64_t vocab = config_.vocab_size;
  std::vector<float> row(static_cast<size_t>(vocab));  // [vocab] processed copy of one logits row
  for (size_t i = 0; i < requests.size(); ++i) {
    const SampleRequest& r = requests[i];
    TANDEM_CHECK(r.params != nullptr, "sample request %zu has no parameters", i);
    TANDEM_CHECK(r.logit_index >= 0 && r.logit_index < num_logits_,
                 "logit_index %d outside the %lld rows of the last forward", r.logit_index,
                 (long long)num_logits_);
    TANDEM_CHECK(r.rng != nullptr || r.params->greedy(), "sample request %zu has no rng", i);
    TANDEM_CHECK(r.fed < 0, "sample request %zu is fed (sample_async only)", i);
    std::copy_n(&logits_[size_t(r.logit_index * vocab)], vocab, row.data());
    apply_logits_processors(row, *r.params, r.history, r.suppress, valid_vocab_);
    SamplingRng unused;  // greedy makes no draw
    out_tokens[i] = sample_token(row, *r.params, r.rng ? *r.rng : unused);
  }
}

void CpuRunner::probs(std::span<const SampleRequest> requests, int32_t width, std::span<float> out,
                      std::span<int32_t> draws) {
  const int64_t vocab = config_.vocab_size;
  TANDEM_CHECK(width >= 1 && width <= vocab, "probability rows of %d ids, logits of %lld", width,
               (long long)vocab);
  TANDEM_CHECK(out.size() >= requests.size() * size_t(width), "%zu floats for %zu rows of %d",
               out.size(), requests.size(), width);
  for (size_t i = 0; i < requests.size(); ++i) {
    TANDEM_CHECK(requests[i].params != nullptr, "probability request %zu has no parameters", i);
    TANDEM_CHECK(requests[i].logit_index >= 0 && requests[i].logit_index < num_logits_,
                 "logit_index %d outside the %lld rows of the last forward",
                 requests[i].logit_index, (long long)num_logits_);
  }
  // One row a task: each takes milliseconds over a 150k vocabulary (top-k/top-p selection).
  pool_.parallel_for(int64_t(requests.size()), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(width));  // [width] one row's processed logits
    for (int64_t i = begin; i < end; ++i) {
      const SampleRequest& r = requests[size_t(i)];
      std::copy_n(&logits_[size_t(r.logit_index) * size_t(vocab)], width, row.data());
      // Ids from valid_vocab_ on were not scored: 0 in every row.
      apply_logits_processors(row, *r.params, r.history, r.suppress, std::min(width, valid_vocab_));
      logits_to_probs(row, *r.params, out.subspan(size_t(i) * size_t(width), size_t(width)));
    }
  });
  if (draws.empty()) return;
  TANDEM_CHECK(draws.size() >= requests.size(), "%zu draws for %zu rows", draws.size(),
               requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {  // in request order: the generators' order
    const SampleRequest& r = requests[i];
    // Greedy rows are one-hot at the argmax and make no draw, as in sample_token.
    const bool greedy = r.params->greedy();
    TANDEM_CHECK(greedy || r.rng != nullptr, "a drawn probability row needs its generator");
    draws[i] = sample_from_probs(out.subspan(i * size_t(width), size_t(width)),
                                 greedy ? 0.0 : r.rng->next_uniform());
  }
}

ProbRows CpuRunner::make_prob_rows(int32_t rows, int32_t width) const {
  TANDEM_CHECK(rows >= 0 && width >= 1, "%d probability rows of %d ids", rows, width);
  float* data = new float[size_t(rows) * size_t(width)];
  return ProbRows(data, rows, width, ProbRows::kHost, [](float* p, int32_t) { delete[] p; });
}

void CpuRunner::probs_into(std::span<const SampleRequest> requests, ProbRows& rows,
                           int32_t first_slot, std::span<int32_t> draws) {
  TANDEM_CHECK(rows.device() == ProbRows::kHost, "probability rows on cuda:%d, runner on %s",
               rows.device(), device_.c_str());
  TANDEM_CHECK(first_slot >= 0 && size_t(first_slot) + requests.size() <= size_t(rows.rows()),
               "slots [%d, %d) of %d probability rows", first_slot,
               first_slot + int32_t(requests.size()), rows.rows());
  const size_t width = size_t(rows.width());
  probs(requests, rows.width(), {rows.row(first_slot), requests.size() * width}, draws);
}

void CpuRunner::accept_sampled(std::span<const SampledDrafts> seqs, const ProbRows& draft_rows,
                               const ProbRows& target_rows, std::span<SpeculativeResult> out) {
  TANDEM_CHECK(draft_rows.device() == ProbRows::kHost && target_rows.device() == ProbRows::kHost,
               "probability rows on cuda:%d and cuda:%d, runner on %s", draft_rows.device(),
               target_rows.device(), device_.c_str());
  check_sampled_drafts(seqs, draft_rows, target_rows, out.size());
  const int32_t width = target_rows.width();
  std::vector<const float*> drafts;  // [k] the sequence's draft rows, where they lie
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SampledDrafts& s = seqs[i];
    const size_t k = s.tokens.size();
    drafts.clear();
    for (const int32_t slot : s.draft_slots) drafts.push_back(draft_rows.row(slot));
    const std::span<const float> target(target_rows.row(s.target_slot), (k + 1) * size_t(width));
    out[i] = tandem::accept_sampled(s.tokens, drafts, target, width, *s.rng);
  }
}

void CpuRunner::copy_logits(std::span<float> out) {
  const size_t count = size_t(num_logits_ * config_.vocab_size);
  TANDEM_CHECK(out.size() >= count, "copy_logits: %zu floats for %zu logits", out.size(), count);
  std::copy_n(logits_.data(), count, out.data());
}

KvPoolView CpuRunner::kv_pool_view() {
  KvPoolView view;
  for (size_t l = 0; l < k_pages_.size(); ++l) {
    view.k.push_back(k_pages_[l].as<std::byte>());
    view.v.push_back(v_pages_[l].as<std::byte>());
  }
  view.page_bytes = page_floats_ * sizeof(float);
  view.num_pages = num_pages_;
  view.device = -1;
  return view;
}

Result<std::unique_ptr<ModelRunner>> make_cpu_runner(const ModelDir& model,
                                                     const RunnerOptions& opts) {
  if (!is_device_name(opts.device, "cpu"))
    return make_error(ErrorCode::kInvalidArgument,
                      "device '" + opts.device + "' is not 'cpu' or 'cpu:N'");
  if (opts.page_size <= 0)
    return make_error(ErrorCode::kInvalidArgument,
                      "page_size must be positive, got " + std::to_string(opts.page_size));
  if (opts.num_pages < 0)
    return make_error(ErrorCode::kInvalidArgument, "num_pages must be >= 0 (0 = default), got " +
                                                       std::to_string(opts.num_pages));
  if (opts.threads < 0)
    return make_error(ErrorCode::kInvalidArgument,
                      "threads must be >= 0 (0 = all cores), got " + std::to_string(opts.threads));
  const ModelConfig& c = model.config;
  const int64_t page_bytes_all_layers =
      int64_t(opts.page_size) * c.num_kv_heads * c.head_dim * 4 * 2 * c.num_layers;
  int32_t num_pages = opts.num_pages;
  if (num_pages == 0)
    num_pages = int32_t(std::clamp<int64_t>(kDefaultKvBytes / page_bytes_all_layers, 1, 1 << 30));
  // The pool is mapped lazily, so a size past the machine's memory would only fail (or swap)
  // pages later; and the page pool's own bookkeeping is allocated up front (--kv-pages 2e9: tens
  // of GB of it; no start within a minute). Refused here, naming the flags that size it.
  const int64_t machine_bytes = machine_memory_bytes();
  if (machine_bytes > 0 && num_pages > machine_bytes / page_bytes_all_layers) {
    return make_error(ErrorCode::kOutOfPages,
                      "--kv-pages " + std::to_string(num_pages) + " of " +
                          std::to_string(page_bytes_all_layers) + " bytes (--page-size " +
                          std::to_string(opts.page_size) + ") need more than this machine's " +
                          std::to_string(machine_bytes >> 20) + " MiB of memory");
  }
  TANDEM_ASSIGN_OR_RETURN(
      QuantConfig quant,
      load_time_quantization(opts.quantization, model.config.quant, "--quantization"));
  return std::unique_ptr<ModelRunner>(new CpuRunner(model, opts, num_pages, quant));
}

}  // namespace tandem
