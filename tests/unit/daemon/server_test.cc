// The server in-process: a loop thread around a FakeEngine, clients over a real Unix socket.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include "daemon/client.h"
#include "daemon/server.h"
#include "fake_engine.h"

namespace tandem::daemon {
namespace {

using namespace std::chrono_literals;
using testing::fake_tokens;
using testing::ids_prompt;
using testing::max_tokens;

// Runs for minutes at the test pace, and fits the fake pool (4096 pages of 16 tokens).
constexpr int32_t kLongRequest = 50000;

class TestServer {
 public:
  explicit TestServer(ServerOptions options, testing::FakeEngineOptions engine_options = {})
      : engine_(engine_options) {
    static int counter = 0;
    options.socket_path =
        (std::filesystem::temp_directory_path() /
         ("tandemd_unit_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + ".sock"))
            .string();
    socket_ = options.socket_path;
    engine_.start();
    uv_loop_init(&loop_);
    server_ = std::make_unique<Server>(
        &loop_, engine_, testing::fake_prompt_builder(), [](const std::string&) {}, options);
    REQUIRE(server_->start().ok());
    thread_ = std::thread([this] { uv_run(&loop_, UV_RUN_DEFAULT); });
  }
  // SIGTERM, as systemd stops the daemon; returns uv_loop_close()'s result.
  int stop() {
    kill(getpid(), SIGTERM);
    thread_.join();
    engine_.stop(0);
    server_.reset();
    return uv_loop_close(&loop_);
  }
  ~TestServer() {
    if (thread_.joinable()) stop();
  }
  Client connect() {
    auto c = Client::connect(socket_);
    REQUIRE(c.ok());
    return std::move(c).value();
  }
  testing::FakeEngine& engine() { return engine_; }

 private:
  testing::FakeEngine engine_;
  uv_loop_t loop_{};
  std::unique_ptr<Server> server_;
  std::thread thread_;
  std::string socket_;
};

// Polls status until no pages are used and nothing runs.
bool pages_return_to_zero(Client& c) {
  for (int i = 0; i < 400; ++i) {
    auto s = query_status(c);
    REQUIRE(s.ok());
    if (s->engine.pools.at(0).used_pages == 0 && s->engine.running == 0 &&
        s->requests_in_flight == 0) {
      return true;
    }
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

TEST_CASE("streamed and non-streamed generation return the engine's tokens") {
  TestServer server(ServerOptions{});
  Client c = server.connect();
  std::vector<std::string> deltas;
  GenerateOptions opts;
  opts.on_text = [&](const std::string& t) { deltas.push_back(t); };
  auto r = generate(c, 1, ids_prompt({5, 6}), max_tokens(8), opts);
  REQUIRE(r.ok());
  CHECK(r->prompt_tokens == 2);
  CHECK(r->ids == fake_tokens(6, 8));
  CHECK(deltas.size() == 8);
  CHECK(r->finished.reason == FinishReason::kLength);
  CHECK(r->finished.usage.completion_tokens == 8);

  GenerateOptions whole;
  whole.stream = false;
  whole.on_text = [&](const std::string&) { deltas.push_back("x"); };
  deltas.clear();
  auto q = generate(c, 2, ids_prompt({5, 6}), max_tokens(8), whole);
  REQUIRE(q.ok());
  CHECK(q->ids == r->ids);
  CHECK(q->text == r->text);
  CHECK(deltas.size() == 1);  // one TokenEvent before Finished
  CHECK(server.stop() == 0);
}

TEST_CASE("rejected requests get a typed Error and the connection stays usable") {
  ServerOptions o;
  o.max_requests_per_connection = 1;
  TestServer server(o, testing::FakeEngineOptions{.step_ms = 5});
  Client c = server.connect();
  PromptInput empty = ids_prompt({});
  auto e1 = generate(c, 1, empty, max_tokens(4), {});
  REQUIRE_FALSE(e1.ok());
  CHECK(e1.error().code == ErrorCode::kInvalidArgument);
  auto e2 = generate(c, 2, ids_prompt({5000}), max_tokens(4), {});  // outside the fake vocab
  REQUIRE_FALSE(e2.ok());
  CHECK(e2.error().message.find("vocabulary") != std::string::npos);

  // A second request in flight on a connection limited to one.
  REQUIRE(c.send(encode_generate(10, ids_prompt({1}), max_tokens(50), true, true)).ok());
  REQUIRE(c.send(encode_generate(11, ids_prompt({1}), max_tokens(5), true, true)).ok());
  bool overloaded = false, finished = false;
  while (!finished) {
    auto f = c.receive(5000);
    REQUIRE(f.ok());
    if (f->reply->id() == 11) {
      REQUIRE(f->reply->body_type() == wire::ReplyBody::ErrorInfo);
      CHECK(f->reply->body_as_ErrorInfo()->code() == wire::ErrorCode::Overloaded);
      overloaded = true;
    }
    finished = f->reply->body_type() == wire::ReplyBody::Finished;
  }
  CHECK(overloaded);
  auto ok = generate(c, 3, ids_prompt({1}), max_tokens(2), {});
  CHECK(ok.ok());
  CHECK(server.stop() == 0);
}

TEST_CASE("cancel and disconnect abort a request and free its pages") {
  TestServer server(ServerOptions{}, testing::FakeEngineOptions{.step_ms = 2});
  Client c = server.connect();
  REQUIRE(
      c.send(encode_generate(1, ids_prompt({1, 2, 3}), max_tokens(kLongRequest), true, true)).ok());
  int tokens = 0;
  for (;;) {
    auto f = c.receive(5000);
    REQUIRE(f.ok());
    if (f->reply->body_type() == wire::ReplyBody::TokenEvent && ++tokens == 5) {
      REQUIRE(c.send(encode_cancel(2, 1)).ok());
    }
    if (f->reply->body_type() == wire::ReplyBody::Finished) {
      CHECK(f->reply->body_as_Finished()->reason() == wire::FinishReason::Abort);
      break;
    }
  }
  CHECK(pages_return_to_zero(c));

  {
    Client gone = server.connect();
    REQUIRE(
        gone.send(encode_generate(1, ids_prompt({1}), max_tokens(kLongRequest), true, true)).ok());
    REQUIRE(gone.receive(5000).ok());  // Accepted
    REQUIRE(gone.receive(5000).ok());  // a token: it holds pages now
    auto s = query_status(c);
    REQUIRE(s.ok());
    CHECK(s->engine.pools.at(0).used_pages > 0);
  }  // closed mid-stream
  CHECK(pages_return_to_zero(c));
  CHECK(server.stop() == 0);
}

TEST_CASE("a malformed frame closes only its connection") {
  TestServer server(ServerOptions{});
  Client bad = server.connect();
  Frame junk = encode_cancel(1, 1);
  std::memset(junk.data() + kPrefixBytes, 0xEE, junk.size() - kPrefixBytes);
  REQUIRE(bad.send(junk).ok());
  auto reply = bad.receive(5000);
  REQUIRE(reply.ok());
  REQUIRE(reply->reply->body_type() == wire::ReplyBody::ErrorInfo);
  CHECK(reply->reply->body_as_ErrorInfo()->code() == wire::ErrorCode::Protocol);
  auto closed = bad.receive(5000);
  REQUIRE_FALSE(closed.ok());
  CHECK(closed.error().code == ErrorCode::kIo);

  Client good = server.connect();
  auto h = query_health(good, 5000);
  REQUIRE(h.ok());
  CHECK(h->ok);
  CHECK(server.stop() == 0);
}

TEST_CASE("a reader that stops reading gets coalesced tokens and slows nobody else") {
  ServerOptions o;
  o.max_output_buffer_bytes = 4096;
  TestServer server(o, testing::FakeEngineOptions{.step_ms = 0});
  Client slow = server.connect();
  const int32_t n = 20000;
  REQUIRE(slow.send(encode_generate(1, ids_prompt({1}), max_tokens(n), true, true)).ok());
  std::this_thread::sleep_for(50ms);

  Client fast = server.connect();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = generate(fast, 1, ids_prompt({2}), max_tokens(50), {});
  REQUIRE(r.ok());
  CHECK(r->ids.size() == 50);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);

  // Every token arrives, in fewer frames than tokens.
  int frames = 0;
  std::vector<int32_t> ids;
  for (;;) {
    auto f = slow.receive(10000);
    REQUIRE(f.ok());
    ++frames;
    if (f->reply->body_type() == wire::ReplyBody::TokenEvent) {
      const auto* v = f->reply->body_as_TokenEvent()->ids();
      ids.insert(ids.end(), v->begin(), v->end());
    }
    if (f->reply->body_type() == wire::ReplyBody::Finished) break;
  }
  CHECK(ids == fake_tokens(1, n));
  CHECK(frames < n);
  CHECK(server.stop() == 0);
}

TEST_CASE("SIGTERM drains: short requests finish, long ones end with abort, loop closes") {
  ServerOptions o;
  o.shutdown_timeout_s = 0.3;
  TestServer server(o, testing::FakeEngineOptions{.step_ms = 2});
  Client a = server.connect();
  Client b = server.connect();
  REQUIRE(a.send(encode_generate(1, ids_prompt({1}), max_tokens(20), true, true)).ok());
  REQUIRE(b.send(encode_generate(1, ids_prompt({1}), max_tokens(kLongRequest), true, true)).ok());
  REQUIRE(a.receive(5000).ok());
  REQUIRE(b.receive(5000).ok());
  std::thread stopper([&] { CHECK(server.stop() == 0); });
  auto last = [](Client& c) {
    wire::FinishReason reason = wire::FinishReason::Error;
    for (;;) {
      auto f = c.receive(10000);
      if (!f.ok()) break;  // closed after Finished
      if (f->reply->body_type() == wire::ReplyBody::Finished) {
        reason = f->reply->body_as_Finished()->reason();
      }
    }
    return reason;
  };
  CHECK(last(a) == wire::FinishReason::Length);
  CHECK(last(b) == wire::FinishReason::Abort);
  stopper.join();
}

}  // namespace
}  // namespace tandem::daemon
