#include "serve_load.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "daemon/client.h"

namespace tandem::bench {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0, Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(t - t0).count();
}

RequestOutcome send_one(const std::string& socket, const ServeRequest& req) {
  RequestOutcome out;
  auto client = daemon::Client::connect(socket);
  if (!client) {
    out.error = std::string(error_code_name(client.error().code));
    return out;
  }
  PromptInput prompt;
  if (!req.prompt_text.empty()) {
    prompt.kind = PromptInput::Kind::kText;
    prompt.text = req.prompt_text;
  } else {
    prompt.kind = PromptInput::Kind::kTokenIds;
    prompt.token_ids = req.prompt_ids;
  }
  SamplingParams sampling;
  sampling.temperature = 0.0f;  // greedy: the cost of sampling is not what is measured
  sampling.max_tokens = req.output_len;
  sampling.ignore_eos = true;  // every request generates exactly output_len tokens

  const Clock::time_point sent = Clock::now();
  std::vector<Clock::time_point> events;  // [token events] arrival of each
  daemon::GenerateOptions options;
  options.on_ids = [&](size_t) { events.push_back(Clock::now()); };
  auto result = daemon::generate(*client, 1, prompt, sampling, options);
  const Clock::time_point done = Clock::now();
  if (!result) {
    out.error = std::string(error_code_name(result.error().code));
    return out;
  }
  const FinishEvent& fin = result->finished;
  if (fin.reason == FinishReason::kError || fin.reason == FinishReason::kAbort) {
    out.error = fin.error ? std::string(error_code_name(fin.error->code))
                          : std::string(finish_reason_name(fin.reason));
    return out;
  }
  out.ok = true;
  out.prompt_tokens = fin.usage.prompt_tokens;
  out.output_tokens = fin.usage.completion_tokens;
  out.e2e_ms = ms_since(sent, done);
  out.ttft_ms = events.empty() ? out.e2e_ms : ms_since(sent, events.front());
  if (out.output_tokens > 1) out.tpot_ms = (out.e2e_ms - out.ttft_ms) / (out.output_tokens - 1);
  for (size_t i = 1; i < events.size(); ++i)
    out.itl_ms.push_back(ms_since(events[i - 1], events[i]));
  return out;
}

}  // namespace

LoadRun run_load(const std::vector<ServeRequest>& requests, const LoadOptions& options) {
  LoadRun run;
  run.outcomes.resize(requests.size());
  std::atomic<int32_t> finished{0};
  std::mutex mu;
  std::condition_variable cv;
  int32_t in_flight = 0;
  Clock::time_point last_reply;
  std::vector<std::thread> threads;
  threads.reserve(requests.size());
  const int32_t total = int32_t(requests.size());
  auto tick = [&, next = Clock::now()]() mutable {
    if (options.progress && Clock::now() >= next) {
      options.progress(finished.load(), total);
      next = Clock::now() + std::chrono::milliseconds(100);
    }
  };

  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(options.offsets_s.at(i)));
    while (Clock::now() < due) {
      tick();
      std::this_thread::sleep_until(std::min(due, Clock::now() + std::chrono::milliseconds(50)));
    }
    if (options.max_concurrency > 0) {
      std::unique_lock lock(mu);
      while (in_flight >= options.max_concurrency) {
        cv.wait_for(lock, std::chrono::milliseconds(100));
        lock.unlock();
        tick();
        lock.lock();
      }
    }
    {
      std::lock_guard lock(mu);
      in_flight++;
    }
    const std::string& socket = options.sockets[i % options.sockets.size()];
    threads.emplace_back([&, i, socket] {
      run.outcomes[i] = send_one(socket, requests[i]);
      {
        std::lock_guard lock(mu);
        in_flight--;
        last_reply = std::max(last_reply, Clock::now());
      }
      finished.fetch_add(1);
      cv.notify_all();
    });
  }
  while (finished.load() < total) {
    tick();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (std::thread& t : threads) t.join();
  if (options.progress) options.progress(total, total);
  run.duration_s = std::chrono::duration<double>(last_reply - start).count();
  return run;
}

}  // namespace tandem::bench
