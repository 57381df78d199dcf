// `tandem bench latency --model DIR --input-len N --output-len M --batch-size B [--json]`: the
// same measurement as vLLM's benchmark_latency (TTFT, TPOT, tok/s) plus achieved weight
// bandwidth (MBU), on the CPU or a GPU (--device).
// `tandem bench spec --model DIR --draft DIR ...`: speculative decoding against plain decoding on
// one device (benchmarks/spec_bench.h), one JSON object.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "../benchmarks/latency.h"
#include "../benchmarks/spec_bench.h"
#include "commands.h"
#include "model/model_dir.h"
#include "runner/runner.h"

namespace tandem::cli {

namespace {

void register_bench_spec(CLI::App* bench, int& exit_code) {
  auto* cmd = bench->add_subcommand("spec", "Speculative vs plain decoding of a batch, as JSON");
  struct Flags {
    std::string model, draft, device = "cuda:0", quantization, draft_quantization;
    bench::SpecBenchOptions opts;
    int32_t page_size = 16;
    int32_t threads = 0;
  };
  auto f = std::make_shared<Flags>();
  cmd->add_option("--model", f->model, "Target model directory")->required();
  cmd->add_option("--draft", f->draft, "Draft model directory")->required();
  cmd->add_option("--device", f->device, "cpu or cuda:N (both models)")->capture_default_str();
  cmd->add_option("--input-len", f->opts.input_len, "Prompt tokens")->capture_default_str();
  cmd->add_option("--output-len", f->opts.output_len, "Generated tokens per sequence")
      ->capture_default_str();
  cmd->add_option("--batch-sizes", f->opts.batch_sizes, "Batch sizes, e.g. 1,4,16,64")
      ->delimiter(',');
  cmd->add_option("--ks", f->opts.ks, "Fixed draft lengths, e.g. 1,2,4,8 (adaptive: the largest)")
      ->delimiter(',');
  cmd->add_option("--spec-max-batch", f->opts.spec_max_batch, "The adaptive run's limit")
      ->capture_default_str();
  cmd->add_option("--k-ties", f->opts.k_ties,
                  "An adaptive run for each: the smallest k within this fraction of the best "
                  "k's modelled gain, e.g. 0,0.01 (default 0: the best k)")
      ->delimiter(',');
  cmd->add_option("--draft-vocab", f->opts.draft_vocab,
                  "The draft scores and proposes only ids below this (0 = all)")
      ->capture_default_str();
  cmd->add_option("--temperature", f->opts.temperature,
                  "0 = greedy; > 0 = sampled (the rejection rule, no token comparison)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--page-size", f->page_size, "KV page size")->capture_default_str();
  cmd->add_option_function<std::string>(
         "--async-decode", [f](const std::string& v) { f->opts.async_decode = v == "on"; },
         "on|off: plain steps and greedy draft rounds launched before the last one's ids are read, "
         "as the engines run them (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--threads", f->threads, "CPU runner threads (0 = all cores)");
  cmd->add_option("--quantization", f->quantization,
                  "Quantize the float target at load: fp8 (docs/quantization.md)");
  cmd->add_option("--draft-quantization", f->draft_quantization,
                  "Quantize the float draft at load: fp8");
  cmd->callback([f, &exit_code] {
    auto fail = [&](const Error& e) {
      std::fprintf(stderr, "tandem bench spec: %s\n", e.to_string().c_str());
      exit_code = 1;
    };
    if (f->opts.batch_sizes.empty() || f->opts.ks.empty()) {
      return fail(
          make_error(ErrorCode::kInvalidArgument, "--batch-sizes and --ks may not be empty"));
    }
    auto target_dir = load_model_dir(f->model);
    if (!target_dir) return fail(target_dir.error());
    auto draft_dir = load_model_dir(f->draft);
    if (!draft_dir) return fail(draft_dir.error());
    const int32_t max_batch =
        *std::max_element(f->opts.batch_sizes.begin(), f->opts.batch_sizes.end());
    const int32_t max_k = *std::max_element(f->opts.ks.begin(), f->opts.ks.end());
    const int32_t tokens = f->opts.input_len + f->opts.output_len + max_k + 1;
    RunnerOptions ro;
    ro.device = f->device;
    ro.page_size = f->page_size;
    ro.num_pages = max_batch * ((tokens + f->page_size - 1) / f->page_size + 1);
    ro.max_batch_tokens = std::max(f->opts.input_len, max_batch * (max_k + 1));
    ro.max_seqs = max_batch;
    ro.max_logit_rows = max_batch * (max_k + 1);  // the verify pass: k + 1 rows per sequence
    ro.threads = f->threads;
    RunnerOptions draft_ro = ro;
    ro.quantization = f->quantization;
    draft_ro.quantization = f->draft_quantization;
    auto target = make_runner(*target_dir, ro);
    if (!target) return fail(target.error());
    auto draft = make_runner(*draft_dir, draft_ro);
    if (!draft) return fail(draft.error());
    f->opts.max_forward_tokens = draft_ro.max_batch_tokens;
    auto res = bench::run_spec_bench(**target, **draft, f->opts);
    if (!res) return fail(res.error());
    auto label = [](const std::string& dir, const std::string& q) {
      return q.empty() ? dir : dir + " (--quantization " + q + ")";
    };
    std::printf("%s\n", bench::spec_bench_json(f->opts, *res, label(f->model, f->quantization),
                                               label(f->draft, f->draft_quantization))
                            .c_str());
  });
}

}  // namespace

void register_bench(CLI::App& app, int& exit_code) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  register_bench_serve(*bench, exit_code);
  register_bench_spec(bench, exit_code);
  auto* lat = bench->add_subcommand("latency", "Prefill and decode latency of one batch");
  struct Flags {
    std::string model, device = "cuda:0", quantization;
    bench::LatencyOptions opts;
    int32_t page_size = 16;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  lat->add_option("--model", f->model, "Model directory")->required();
  lat->add_option("--device", f->device, "cpu or cuda:N")->capture_default_str();
  lat->add_option("--input-len", f->opts.input_len, "Prompt tokens")->capture_default_str();
  lat->add_option("--output-len", f->opts.output_len, "Generated tokens per sequence")
      ->capture_default_str();
  lat->add_option("--batch-size", f->opts.batch_size, "Sequences decoding together")
      ->capture_default_str();
  lat->add_option("--query-len", f->opts.query_len,
                  "Tokens a sequence per decode step, each sampled (a verify pass of k = N - 1)")
      ->capture_default_str();
  lat->add_option("--page-size", f->page_size, "KV page size")->capture_default_str();
  lat->add_option_function<std::string>(
         "--async-decode", [f](const std::string& v) { f->opts.async_decode = v == "on"; },
         "on|off: one-token steps as the engine runs them, the next launched before this one's "
         "ids are read (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  lat->add_option("--quantization", f->quantization,
                  "fp8: quantize a float checkpoint's Linears at load");
  lat->add_flag("--json", f->json, "Print one JSON object");
  lat->callback([f, &exit_code] {
    auto fail = [&](const Error& e) {
      std::fprintf(stderr, "tandem bench latency: %s\n", e.to_string().c_str());
      exit_code = 1;
    };
    auto model = load_model_dir(f->model);
    if (!model) return fail(model.error());
    if (f->opts.query_len < 1) {
      return fail(make_error(ErrorCode::kInvalidArgument, "--query-len must be at least 1"));
    }
    const int32_t per_seq = bench::latency_pages_per_seq(f->opts, f->page_size);
    const int32_t step_tokens = f->opts.batch_size * f->opts.query_len;
    RunnerOptions ro;
    ro.device = f->device;
    ro.page_size = f->page_size;
    ro.num_pages = per_seq * f->opts.batch_size;
    ro.max_batch_tokens = std::max(f->opts.input_len, step_tokens);
    ro.max_seqs = f->opts.batch_size;
    ro.max_logit_rows = step_tokens;
    ro.quantization = f->quantization;
    auto runner = make_runner(*model, ro);
    if (!runner) return fail(runner.error());
    // Bytes a decode step reads: every weight once, except the gathered embedding table (which
    // is read whole when it doubles as the tied lm_head).
    const ModelConfig& c = model->config;
    int64_t bytes = int64_t(model->weights.total_bytes());
    if (!c.tie_word_embeddings)
      bytes -= c.vocab_size * c.hidden_size * int64_t(dtype_size(c.dtype));
    auto res = bench::run_latency(**runner, f->opts, bytes);
    if (!res) return fail(res.error());
    if (f->json) {
      std::printf("%s\n", bench::to_json(f->opts, *res, f->model).c_str());
    } else {
      std::printf("TTFT %.2f ms, TPOT %.3f ms, %.1f tok/s, %.2f TB/s (MBU %.2f)\n", res->ttft_ms,
                  res->tpot_ms, res->tok_per_s, res->achieved_tb_per_s, res->mbu);
      // The clock each phase ran at (GPU only): a power-capped board runs slower than its peak.
      for (const auto& [phase, clk] :
           {std::pair{"prefill", &res->prefill_clocks}, std::pair{"decode", &res->decode_clocks}}) {
        if (clk->samples == 0) continue;
        std::printf("%s: SM clock %.0f-%.0f MHz (mean %.0f), clock events: %s\n", phase,
                    clk->sm_mhz_min, clk->sm_mhz_max, clk->sm_mhz_mean,
                    bench::clock_reason_names(clk->reasons).c_str());
      }
    }
  });
}

}  // namespace tandem::cli
