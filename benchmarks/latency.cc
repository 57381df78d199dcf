#include "latency.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

namespace tandem::bench {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int32_t latency_pages_per_seq(const LatencyOptions& o, int32_t page_size) {
  const int64_t tokens = int64_t(o.input_len) + int64_t(o.output_len - 1) * o.query_len;
  return int32_t((tokens + page_size - 1) / page_size);
}

Result<LatencyResult> run_latency(ModelRunner& r, const LatencyOptions& o,
                                  int64_t weight_bytes_per_step) {
  if (o.input_len < 1 || o.output_len < 2 || o.batch_size < 1 || o.query_len < 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--input-len >= 1, --output-len >= 2, --batch-size >= 1 and --query-len >= 1 "
                      "are needed");
  }
  const int32_t page = r.page_size();
  const int32_t per_seq = latency_pages_per_seq(o, page);
  const int32_t q = o.query_len;
  if (int64_t(per_seq) * o.batch_size > r.num_pages()) {
    return make_error(ErrorCode::kOutOfPages,
                      std::to_string(o.batch_size) + " sequences of " +
                          std::to_string(o.input_len + (o.output_len - 1) * q) + " tokens need " +
                          std::to_string(int64_t(per_seq) * o.batch_size) +
                          " KV pages; the runner has " + std::to_string(r.num_pages()));
  }
  const int64_t vocab = r.config().vocab_size;
  std::vector<std::vector<int32_t>> pages(static_cast<size_t>(o.batch_size));
  for (int32_t s = 0; s < o.batch_size; ++s)
    for (int32_t p = 0; p < per_seq; ++p) pages[size_t(s)].push_back(s * per_seq + p);
  // [batch_size][input_len]: each sequence its own prompt, so that its tokens are its own.
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(o.batch_size));
  for (int32_t s = 0; s < o.batch_size; ++s) {
    for (int32_t i = 0; i < o.input_len; ++i) {
      prompts[size_t(s)].push_back(int32_t((int64_t(i) * 7919 + 13 + int64_t(s) * 104729) % vocab));
    }
  }

  ResolvedSampling greedy;
  greedy.temperature = 0.0f;
  SampleRequest first;
  first.params = &greedy;
  std::vector<int32_t> first_tokens(static_cast<size_t>(o.batch_size));  // [batch_size]
  auto prefill = [&](int32_t s) {
    SeqSlice sl{0, o.input_len, o.input_len, pages[size_t(s)]};
    const std::vector<int32_t> rows = {o.input_len - 1};
    r.forward(ForwardBatch{prompts[size_t(s)], std::span(&sl, 1), rows});
    r.sample(std::span(&first, 1), std::span(&first_tokens[size_t(s)], 1));
  };
  std::vector<double> ttft, prefill_spans;
  std::optional<ClockSampler> clocks;
  for (int32_t rep = 0; rep <= o.prefill_repeats; ++rep) {
    if (rep == 1) clocks.emplace(r.pci_bus_id());  // after the warm-up
    const auto t0 = std::chrono::steady_clock::now();
    prefill(0);
    if (rep == 0) continue;
    ttft.push_back(ms_since(t0));
    int64_t start_ns = 0, end_ns = 0;
    const auto interval = r.last_forward_interval();
    if (interval && interval->resolve(start_ns, end_ns)) {
      prefill_spans.push_back(double(end_ns - start_ns) * 1e-6);
    }
  }
  ClockStats prefill_clocks = clocks ? clocks->stop() : ClockStats{};
  for (int32_t s = 1; s < o.batch_size; ++s) prefill(s);

  const size_t nb = static_cast<size_t>(o.batch_size);
  const size_t nt = nb * size_t(q);  // tokens (and logit rows) a step: [batch][query_len]
  std::vector<int32_t> toks(nt), rows(nt), out(nt);
  std::vector<SampleRequest> reqs(nt);
  std::vector<SamplingRng> rngs(nb);
  std::vector<std::vector<int32_t>> outputs(nb);  // [batch][step] for the penalties
  for (size_t s = 0; s < nb; ++s) {
    rngs[s] = SamplingRng{s + 1, 0};
    outputs[s].reserve(size_t(o.output_len) * size_t(q));
  }
  for (size_t t = 0; t < nt; ++t) {
    toks[t] = first_tokens[t / size_t(q)];
    rows[t] = int32_t(t);
    reqs[t].logit_index = int32_t(t);
    reqs[t].params = &o.decode_sampling;
    reqs[t].rng = &rngs[t / size_t(q)];
  }
  std::vector<double> steps, spans;
  if (o.before_decode) o.before_decode();
  const int32_t warmup = std::min(3, (o.output_len - 1) / 2);
  std::vector<SeqSlice> sl(nb);
  auto slices = [&](int32_t step) {
    for (size_t s = 0; s < nb; ++s) {
      sl[s] = {int32_t(s) * q, q, o.input_len + (step + 1) * q, pages[s]};
    }
  };
  auto device_span = [&](const std::shared_ptr<const DeviceInterval>& interval) {
    int64_t start_ns = 0, end_ns = 0;
    if (interval && interval->resolve(start_ns, end_ns)) {
      spans.push_back(double(end_ns - start_ns) * 1e-6);
    }
  };
  const int32_t num_steps = o.output_len - 1;
  if (o.async_decode && q == 1) {
    // The engine's loop (AsyncDecode): step N + 1 goes to the device, its tokens fed from step
    // N's ids there, before the host reads step N's. A step's time is the span between two
    // reads of ids in a row.
    std::vector<int32_t> fed(nt);
    // [num_steps] each step's device span, read once its ids are back
    std::vector<std::shared_ptr<const DeviceInterval>> intervals(static_cast<size_t>(num_steps));
    auto launch = [&](int32_t step) {
      slices(step);
      const bool feeds = step > 0;
      for (size_t t = 0; t < nt; ++t) {
        fed[t] = feeds ? int32_t(t) : -1;
        reqs[t].history = TokenHistory{prompts[t], outputs[t]};
        reqs[t].fed = fed[t];  // the id still on the device is the output's last
      }
      ForwardBatch batch{toks, sl, rows,
                         feeds ? std::span<const int32_t>(fed) : std::span<const int32_t>()};
      batch.greedy_next = greedy_in_row_order(reqs, rows.size());  // as the engine promises
      r.forward(batch);
      intervals[size_t(step)] = r.last_forward_interval();
      r.sample_async(reqs);
    };
    auto t_read = std::chrono::steady_clock::now();
    launch(0);
    for (int32_t step = 0; step < num_steps; ++step) {
      if (step == warmup) clocks.emplace(r.pci_bus_id());
      if (step + 1 < num_steps) launch(step + 1);
      r.sample_wait(out);
      const auto now = std::chrono::steady_clock::now();
      if (step >= warmup) {
        steps.push_back(std::chrono::duration<double, std::milli>(now - t_read).count());
        device_span(intervals[size_t(step)]);
      }
      t_read = now;
      for (size_t t = 0; t < nt; ++t) outputs[t].push_back(out[t]);
    }
  } else {
    for (int32_t step = 0; step < num_steps; ++step) {
      slices(step);
      if (step == warmup) clocks.emplace(r.pci_bus_id());
      const auto t0 = std::chrono::steady_clock::now();
      r.forward(ForwardBatch{toks, sl, rows});
      for (size_t t = 0; t < nt; ++t) {
        reqs[t].history = TokenHistory{prompts[t / size_t(q)], outputs[t / size_t(q)]};
      }
      r.sample(reqs, out);
      if (step >= warmup) {
        steps.push_back(ms_since(t0));
        device_span(r.last_forward_interval());
      }
      // Every row's token goes in, as if every proposal had been accepted.
      toks = out;
      for (size_t t = 0; t < nt; ++t) outputs[t / size_t(q)].push_back(out[t]);
    }
  }
  LatencyResult res;
  res.outputs = std::move(outputs);
  res.prefill_clocks = prefill_clocks;
  if (clocks) res.decode_clocks = clocks->stop();
  res.ttft_ms = median(ttft);
  res.tpot_ms = median(steps);
  res.tok_per_s = 1000.0 * double(nt) / res.tpot_ms;
  res.weight_bytes_per_step = weight_bytes_per_step;
  res.achieved_tb_per_s = double(weight_bytes_per_step) / (res.tpot_ms * 1e-3) / 1e12;
  res.mbu = res.achieved_tb_per_s / 4.2;
  if (!spans.empty()) res.forward_device_ms = median(spans);
  if (!prefill_spans.empty()) res.prefill_device_ms = median(prefill_spans);
  return res;
}

std::string to_json(const LatencyOptions& o, const LatencyResult& r, const std::string& label) {
  char buf[768];
  std::snprintf(buf, sizeof(buf),
                "{\"model\": \"%s\", \"input_len\": %d, \"output_len\": %d, \"batch_size\": %d, "
                "\"query_len\": %d, \"async_decode\": %s, \"ttft_ms\": %.3f, \"tpot_ms\": %.4f, "
                "\"tok_per_s\": %.1f, "
                "\"weight_bytes_per_step\": %lld, \"achieved_tb_per_s\": %.3f, "
                "\"mbu_vs_4p2\": %.3f",
                label.c_str(), o.input_len, o.output_len, o.batch_size, o.query_len,
                o.async_decode && o.query_len == 1 ? "true" : "false", r.ttft_ms, r.tpot_ms,
                r.tok_per_s, static_cast<long long>(r.weight_bytes_per_step), r.achieved_tb_per_s,
                r.mbu);
  std::string json = buf;
  if (r.forward_device_ms > 0) {
    std::snprintf(buf, sizeof(buf), ", \"forward_device_ms\": %.4f", r.forward_device_ms);
    json += buf;
  }
  if (r.prefill_device_ms > 0) {
    std::snprintf(buf, sizeof(buf), ", \"prefill_device_ms\": %.4f", r.prefill_device_ms);
    json += buf;
  }
  for (const auto& [key, stats] : {std::pair{"prefill_clocks", &r.prefill_clocks},
                                   std::pair{"decode_clocks", &r.decode_clocks}}) {
    const std::string part = clock_stats_json(key, *stats);
    if (!part.empty()) json += ", " + part;
  }
  return json + "}";
}

}  // namespace tandem::bench
