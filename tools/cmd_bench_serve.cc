// `tandem bench serve --socket S [--rates 1,2,4]`: an online serving benchmark against a running
// tandemd, in the manner of vLLM's benchmark_serving: Poisson (or fixed-rate) arrivals, lengths
// from a seeded lognormal or a JSONL file, one streaming client per request; TTFT, TPOT, ITL and
// E2E percentiles, throughput and goodput under an SLO, per rate; JSON and an SVG plot.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "../benchmarks/serve_load.h"
#include "../benchmarks/serve_plot.h"
#include "commands.h"
#include "daemon/socket_path.h"

namespace tandem::cli {

namespace {

struct ServeFlags {
  std::vector<std::string> sockets;
  std::string rates = "1";
  std::string arrivals = "poisson";
  bench::WorkloadOptions workload;
  bench::Slo slo;
  int32_t max_concurrency = 0;
  int32_t warmup = 0;
  std::string label = "tandem";
  std::string out_json, out_svg;
  bool json = false;
};

Result<std::vector<double>> parse_rates(const std::string& text) {
  std::vector<double> rates;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    double r = 0;
    try {
      size_t used = 0;
      r = std::stod(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      return make_error(ErrorCode::kInvalidArgument, "--rates: '" + item + "' is not a number");
    }
    if (!(r > 0)) return make_error(ErrorCode::kInvalidArgument, "--rates: rates must be > 0");
    rates.push_back(r);
  }
  if (rates.empty()) return make_error(ErrorCode::kInvalidArgument, "--rates is empty");
  return rates;
}

// "[=====>      ] 12/64  rate 2 req/s" on stderr, redrawn in place; only on a terminal.
void draw_progress(double rate, int32_t done, int32_t total) {
  constexpr int kWidth = 30;
  const int filled = total > 0 ? int(double(done) / total * kWidth) : kWidth;
  std::string bar(size_t(filled), '=');
  if (filled < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  std::fprintf(stderr, "\r[%s] %d/%d  rate %s req/s ", bar.c_str(), done, total,
               std::isfinite(rate) ? std::to_string(rate).substr(0, 6).c_str() : "inf");
  if (done == total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

void print_summary(const bench::RateSummary& s) {
  auto row = [](const char* name, const bench::Percentiles& p) {
    std::printf("  %-5s mean %9.2f  p50 %9.2f  p90 %9.2f  p99 %9.2f ms\n", name, p.mean, p.p50,
                p.p90, p.p99);
  };
  std::printf("rate %s req/s: %d/%d completed (%d failed) in %.2f s\n",
              std::isfinite(s.rate) ? std::to_string(s.rate).c_str() : "inf", s.completed,
              s.requests, s.failed, s.duration_s);
  for (const auto& [code, n] : s.errors) std::printf("  error %s: %d\n", code.c_str(), n);
  std::printf(
      "  throughput %.3f req/s, %.1f output tok/s, %.1f total tok/s; goodput %.3f req/s "
      "(%d within the SLO)\n",
      s.request_throughput, s.output_throughput, s.total_token_throughput, s.goodput, s.good);
  row("TTFT", s.ttft);
  row("TPOT", s.tpot);
  row("ITL", s.itl);
  row("E2E", s.e2e);
}

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return make_error(ErrorCode::kIo, "cannot write " + path);
  return Status::Ok();
}

Status run_serve(const ServeFlags& f) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<double> rates, parse_rates(f.rates));
  if (f.arrivals != "poisson" && f.arrivals != "fixed") {
    return make_error(ErrorCode::kInvalidArgument, "--arrivals must be poisson or fixed");
  }
  const auto kind = f.arrivals == "poisson" ? bench::Arrivals::kPoisson : bench::Arrivals::kFixed;
  TANDEM_ASSIGN_OR_RETURN(std::vector<bench::ServeRequest> requests,
                          bench::make_workload(f.workload));
  std::vector<std::string> sockets = f.sockets;
  if (sockets.empty()) sockets.push_back(daemon::client_socket_path());
  const bool tty = ::isatty(STDERR_FILENO) == 1;

  if (f.warmup > 0) {  // one at a time on every socket: first-use costs are not measured
    std::vector<bench::ServeRequest> warm(
        requests.begin(), requests.begin() + std::min<size_t>(size_t(f.warmup), requests.size()));
    for (const std::string& socket : sockets) {
      for (const auto& r : warm) {
        bench::LoadOptions lo;
        lo.sockets = {socket};
        lo.offsets_s = {0};
        auto w = bench::run_load({r}, lo);
        if (!w.outcomes[0].ok) {
          return make_error(ErrorCode::kIo,
                            "warmup request on " + socket + " failed: " + w.outcomes[0].error);
        }
      }
    }
  }

  nlohmann::json results = nlohmann::json::array();
  bench::PlotSeries series{f.label, {}};
  for (size_t k = 0; k < rates.size(); ++k) {
    bench::LoadOptions lo;
    lo.sockets = sockets;
    lo.offsets_s =
        bench::arrival_offsets(int32_t(requests.size()), rates[k], kind, f.workload.seed + k);
    lo.max_concurrency = f.max_concurrency;
    const double rate = rates[k];
    if (tty)
      lo.progress = [rate](int32_t done, int32_t total) { draw_progress(rate, done, total); };
    bench::LoadRun run = bench::run_load(requests, lo);
    bench::RateSummary s = bench::summarize(rate, run.outcomes, run.duration_s, f.slo);
    if (!f.json) print_summary(s);
    results.push_back(bench::to_json(s));
    series.points.push_back(std::move(s));
  }

  nlohmann::json doc;
  doc["benchmark"] = "serve";
  doc["label"] = f.label;
  doc["sockets"] = sockets;
  const bench::WorkloadOptions& w = f.workload;
  doc["config"] = {{"arrivals", f.arrivals},
                   {"num_prompts", w.num_prompts},
                   {"seed", w.seed},
                   {"dataset", w.dataset},
                   {"input_len", w.input_len},
                   {"output_len", w.output_len},
                   {"len_sigma", w.len_sigma},
                   {"max_input_len", w.max_input_len},
                   {"max_output_len", w.max_output_len},
                   {"max_concurrency", f.max_concurrency},
                   {"warmup", f.warmup}};
  doc["slo"] = {{"ttft_ms", f.slo.ttft_ms}, {"tpot_ms", f.slo.tpot_ms}};
  doc["results"] = results;
  if (f.json) std::cout << doc.dump(2) << std::endl;
  if (!f.out_json.empty()) TANDEM_TRY(write_file(f.out_json, doc.dump(2) + "\n"));
  if (!f.out_svg.empty()) {
    const std::string title = "tandem bench serve: " + f.label + " (" + f.arrivals + ", " +
                              std::to_string(w.num_prompts) + " requests per rate)";
    TANDEM_TRY(write_file(f.out_svg, bench::serve_plot_svg({series}, f.slo, title)));
  }
  return Status::Ok();
}

}  // namespace

void register_bench_serve(CLI::App& bench, int& exit_code) {
  auto* cmd = bench.add_subcommand("serve", "Online serving benchmark against a running tandemd");
  auto f = std::make_shared<ServeFlags>();
  bench::WorkloadOptions& w = f->workload;
  cmd->add_option("--socket", f->sockets,
                  "tandemd socket; give it again for replicas (requests go round-robin)")
      ->default_str(daemon::client_socket_path());
  cmd->add_option("--rates", f->rates, "Request rates (req/s), comma-separated; inf = all at once")
      ->capture_default_str();
  cmd->add_option("--arrivals", f->arrivals, "poisson or fixed inter-arrival times")
      ->capture_default_str();
  cmd->add_option("--num-prompts", w.num_prompts, "Requests per rate")->capture_default_str();
  cmd->add_option("--dataset", w.dataset,
                  "JSONL: {\"prompt\"|\"prompt_ids\"|\"prompt_len\", \"output_len\"} per line");
  cmd->add_option("--input-len", w.input_len, "Median prompt tokens")->capture_default_str();
  cmd->add_option("--output-len", w.output_len, "Median output tokens")->capture_default_str();
  cmd->add_option("--len-sigma", w.len_sigma, "Lognormal sigma of both lengths; 0 = fixed")
      ->capture_default_str();
  cmd->add_option("--max-input-len", w.max_input_len)->capture_default_str();
  cmd->add_option("--max-output-len", w.max_output_len)->capture_default_str();
  cmd->add_option("--min-token-id", w.min_token_id, "Synthetic prompt ids from here")
      ->capture_default_str();
  cmd->add_option("--max-token-id", w.max_token_id, "... up to (excluding) here")
      ->capture_default_str();
  cmd->add_option("--seed", w.seed, "Lengths, prompts and arrivals")->capture_default_str();
  cmd->add_option("--slo-ttft-ms", f->slo.ttft_ms, "Goodput SLO on TTFT")->capture_default_str();
  cmd->add_option("--slo-tpot-ms", f->slo.tpot_ms, "Goodput SLO on TPOT")->capture_default_str();
  cmd->add_option("--max-concurrency", f->max_concurrency, "Requests in flight at most; 0 = any")
      ->capture_default_str();
  cmd->add_option("--warmup", f->warmup, "Requests sent one at a time (per socket) first")
      ->capture_default_str();
  cmd->add_option("--label", f->label, "Name of this configuration in the JSON and plot")
      ->capture_default_str();
  cmd->add_option("--out", f->out_json, "Write the JSON report here");
  cmd->add_option("--svg", f->out_svg, "Write the latency-vs-rate plot here");
  cmd->add_flag("--json", f->json, "Print the JSON report instead of the table");
  cmd->callback([f, &exit_code] {
    Status st = run_serve(*f);
    if (!st.ok()) {
      std::fprintf(stderr, "tandem bench serve: %s\n", st.error().to_string().c_str());
      exit_code = 1;
    }
  });
}

}  // namespace tandem::cli
