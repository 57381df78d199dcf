// Loopback protocol overhead per streamed token: tandemd's server (libuv loop, FlatBuffers
// frames, Unix socket) between an engine that emits timestamped tokens and a blocking client.
//
// latency:    tokens emitted one at a time at a fixed pace; per token, the time from the
//             engine's on_tokens call to the client holding the verified TokenEvent (event
//             queue + uv_async wake-up + encode + write + read + verify).
//             cpu_us_per_token: CPU time of the process per token in that run (server + client
//             work; the pacing engine sleeps) -- the overhead a streamed token costs.
// throughput: tokens emitted back to back; wall time per token at the client.
//
// Prints one JSON object (benchmarks/results/2026-12-01-protocol_overhead_cpu.json is a run).
#include <sys/resource.h>
#include <uv.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "daemon/client.h"
#include "daemon/server.h"
#include "model/config.h"

namespace tandem::daemon {
namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Emits max_tokens tokens per request; each TokenEvent's text is its emission time in ns + ';'.
class TimestampEngine final : public Engine {
 public:
  explicit TimestampEngine(int64_t pace_ns) : pace_ns_(pace_ns) {}
  ~TimestampEngine() override { stop(0); }
  void start() override {
    thread_ = std::thread([this] { worker(); });
  }
  void stop(double) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  Status submit(uint64_t id, GenerateInput input, EngineObserver* observer) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({id, input.sampling.max_tokens, observer});
    }
    cv_.notify_all();
    return Status::Ok();
  }
  void cancel(uint64_t) override {}
  EngineStatus status() const override { return {}; }
  void run_until_idle() override {}
  std::string metrics_text() const override { return {}; }
  std::string trace_json(std::optional<uint64_t>, size_t) const override { return "{}"; }
  // No trace ring: the benchmark times the protocol, not tracing.
  void add_trace_spans(uint64_t, const std::vector<Span>&) override {}
  const Tokenizer& tokenizer() const override { TANDEM_CHECK(false, "no tokenizer"); }
  const ChatTemplate* chat_template() const override { return nullptr; }
  const ModelConfig& model_config() const override { return config_; }
  const GenerationDefaults& generation_defaults() const override { return defaults_; }

 private:
  struct Job {
    uint64_t id;
    int32_t tokens;
    EngineObserver* observer;
  };
  void worker() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = queue_.front();
        queue_.erase(queue_.begin());
      }
      for (int32_t i = 0; i < job.tokens; ++i) {
        // Sleep, not spin: on a small machine a spinning engine takes the loop's core.
        if (pace_ns_ > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(pace_ns_));
        job.observer->on_tokens(TokenEvent{job.id, {i % 1000}, std::to_string(now_ns()) + ";"});
      }
      FinishEvent fin;
      fin.request_id = job.id;
      fin.reason = FinishReason::kLength;
      fin.usage.completion_tokens = job.tokens;
      job.observer->on_finished(std::move(fin));
    }
  }
  int64_t pace_ns_;
  ModelConfig config_;
  GenerationDefaults defaults_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Job> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct RunResult {
  std::vector<double> latency_us;  // per token
  double wall_s = 0;
  double cpu_s = 0;  // the whole process: engine thread (mostly asleep), loop, client
  int64_t tokens = 0;
  int64_t frames = 0;
};

RunResult run_once(int64_t pace_ns, int32_t tokens) {
  const std::string socket =
      (std::filesystem::temp_directory_path() /
       ("tandem_bench_" + std::to_string(getpid()) + "_" + std::to_string(pace_ns) + ".sock"))
          .string();
  TimestampEngine engine(pace_ns);
  engine.start();
  uv_loop_t loop;
  uv_loop_init(&loop);
  ServerOptions options;
  options.socket_path = socket;
  // No coalescing: every token is its own frame, the worst case for per-token cost.
  options.max_output_buffer_bytes = int64_t(1) << 30;
  auto prompts = [](const PromptInput& in) -> Result<std::vector<int32_t>> { return in.token_ids; };
  auto server = std::make_unique<Server>(
      &loop, engine, prompts, [](const std::string&) {}, options);
  TANDEM_CHECK(server->start().ok(), "bench server did not start");
  std::thread loop_thread([&] { uv_run(&loop, UV_RUN_DEFAULT); });

  RunResult out;
  {
    auto client = Client::connect(socket);
    TANDEM_CHECK(client.ok(), "bench client did not connect");
    PromptInput prompt;
    prompt.kind = PromptInput::Kind::kTokenIds;
    prompt.token_ids = {1};
    SamplingParams sampling;
    sampling.max_tokens = tokens;
    out.latency_us.reserve(size_t(tokens));
    const auto t0 = Clock::now();
    const double cpu0 = cpu_seconds();
    TANDEM_CHECK(client->send(encode_generate(1, prompt, sampling, true, true)).ok(), "send");
    for (;;) {
      auto frame = client->receive();
      TANDEM_CHECK(frame.ok(), "receive: %s", frame.ok() ? "" : frame.error().message.c_str());
      const int64_t t = now_ns();
      const wire::Reply& reply = *frame->reply;
      if (reply.body_type() == wire::ReplyBody::TokenEvent) {
        ++out.frames;
        const auto* ev = reply.body_as_TokenEvent();
        out.tokens += ev->ids()->size();
        // A reader that falls behind gets tokens coalesced: one timestamp per token.
        const std::string text = ev->text()->str();
        for (size_t at = 0; at < text.size();) {
          const size_t end = text.find(';', at);
          out.latency_us.push_back(double(t - std::stoll(text.substr(at, end - at))) / 1000.0);
          at = end + 1;
        }
      }
      if (reply.body_type() == wire::ReplyBody::Finished) break;
    }
    out.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    out.cpu_s = cpu_seconds() - cpu0;
  }
  uv_async_t stop{};
  stop.data = server.get();
  uv_async_init(&loop, &stop, [](uv_async_t* h) {
    static_cast<Server*>(h->data)->begin_shutdown();
    uv_close(reinterpret_cast<uv_handle_t*>(h), nullptr);
  });
  uv_async_send(&stop);
  loop_thread.join();
  server.reset();
  TANDEM_CHECK(uv_loop_close(&loop) == 0, "loop handles left open");
  engine.stop(0);
  return out;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

}  // namespace
}  // namespace tandem::daemon

int main(int argc, char** argv) {
  using namespace tandem::daemon;
  CLI::App app{"Loopback protocol overhead per streamed token"};
  int32_t tokens = 20000;
  double pace_us = 100;
  double target_us = 20;
  app.add_option("--tokens", tokens, "Tokens per run");
  app.add_option("--pace-us", pace_us, "Emission interval of the latency run");
  app.add_option("--target-us", target_us, "Per-token budget the result is checked against");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  const RunResult paced = run_once(int64_t(pace_us * 1000), tokens);
  const RunResult burst = run_once(0, tokens);
  const double p50 = percentile(paced.latency_us, 0.50);
  nlohmann::ordered_json j;
  j["benchmark"] = "protocol_overhead";
  j["transport"] = "unix socket, loopback, one client, one request";
  j["cpus"] = std::thread::hardware_concurrency();
  j["tokens"] = tokens;
  j["latency_us"] = {{"pace_us", pace_us},
                     {"p50", p50},
                     {"p90", percentile(paced.latency_us, 0.90)},
                     {"p99", percentile(paced.latency_us, 0.99)},
                     {"max", percentile(paced.latency_us, 1.0)},
                     {"frames", paced.frames},
                     {"cpu_us_per_token", paced.cpu_s * 1e6 / double(paced.tokens)}};
  j["throughput"] = {{"us_per_token", burst.wall_s * 1e6 / double(burst.tokens)},
                     {"tokens_per_s", double(burst.tokens) / burst.wall_s},
                     {"tokens_per_frame", double(burst.tokens) / double(burst.frames)}};
  j["target_us"] = target_us;
  // Checked: the per-token cost while streaming (throughput run, one frame per token). An
  // isolated token's latency also holds two thread wake-ups (engine -> loop, loop -> client).
  j["meets_target"] = burst.wall_s * 1e6 / double(burst.tokens) < target_us;
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}
