// tandemd as a black box: the real daemon binary (tandemd_fake: the daemon around the scripted
// FakeEngine) and the real client commands, over its socket. What users and systemd see.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "daemon/client.h"
#include "unit/daemon/fake_requests.h"

namespace tandem::daemon {
namespace {

using namespace std::chrono_literals;
using testing::fake_tokens;
using testing::ids_prompt;
using testing::max_tokens;
namespace fs = std::filesystem;

std::string env_or_fail(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE_MESSAGE(v != nullptr, name << " is not set (run through meson test)");
  return v;
}

fs::path scratch_dir() {
  static int n = 0;
  fs::path dir = fs::temp_directory_path() /
                 ("tandemd_it_" + std::to_string(getpid()) + "_" + std::to_string(n++));
  fs::create_directories(dir);
  return dir;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A child process with its output in a log file.
class Process {
 public:
  Process(std::vector<std::string> argv, const fs::path& log,
          std::map<std::string, std::string> env = {}, bool watchdog_pid = false)
      : log_(log) {
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      if (watchdog_pid) setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execvp(args[0], args.data());
      _exit(127);
    }
  }
  ~Process() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      wait_exit(10s);
    }
  }
  pid_t pid() const { return pid_; }
  void signal(int sig) { kill(pid_, sig); }
  // The exit status (WEXITSTATUS), -SIGNAL when killed, or -1000 on timeout.
  int wait_exit(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
      std::this_thread::sleep_for(5ms);
    }
    return -1000;
  }
  std::string log() const { return read_file(log_); }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  fs::path log_;
};

// Runs a command to completion; returns its exit status and stdout.
std::pair<int, std::string> run(const std::vector<std::string>& argv) {
  const fs::path out = scratch_dir() / "out.txt";
  Process p(argv, out);
  const int rc = p.wait_exit(60s);
  return {rc, read_file(out)};
}

struct Daemon {
  fs::path dir = scratch_dir();
  std::string socket = (dir / "tandemd.sock").string();
  std::unique_ptr<Process> process;

  explicit Daemon(std::vector<std::string> extra = {}, std::map<std::string, std::string> env = {},
                  bool watchdog_pid = false) {
    std::vector<std::string> argv = {env_or_fail("TANDEMD_FAKE"),
                                     "--model",
                                     "/models/fake",
                                     "--socket",
                                     socket,
                                     "--log-level",
                                     "debug"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process = std::make_unique<Process>(argv, dir / "tandemd.log", env, watchdog_pid);
    REQUIRE_MESSAGE(wait_ready(), "tandemd did not come up:\n" << process->log());
  }
  bool wait_ready() {
    for (int i = 0; i < 1000; ++i) {
      if (auto c = Client::connect(socket); c.ok()) {
        if (auto h = query_health(*c, 2000); h.ok() && h->ok) return true;
      }
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  Client connect() {
    auto c = Client::connect(socket);
    REQUIRE(c.ok());
    return std::move(c).value();
  }
  // SIGTERM and the exit status.
  int stop() {
    process->signal(SIGTERM);
    return process->wait_exit(30s);
  }
  bool healthy() {
    auto c = Client::connect(socket);
    if (!c.ok()) return false;
    auto h = query_health(*c, 5000);
    return h.ok() && h->ok;
  }
};

int used_pages(Client& c) {
  auto s = query_status(c);
  REQUIRE(s.ok());
  return s->engine.pools.at(0).used_pages;
}

bool pages_return_to_zero(Client& c) {
  for (int i = 0; i < 1000; ++i) {
    auto s = query_status(c);
    REQUIRE(s.ok());
    if (s->engine.pools.at(0).used_pages == 0 && s->requests_in_flight == 0) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

void send_raw(int fd, const std::vector<uint8_t>& bytes) {
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size()));
}

// Reads until the daemon closes; true when it did within the timeout.
bool closed_by_daemon(int fd) {
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

TEST_CASE("golden output through the socket, from the client library and the tandem CLI") {
  Daemon d;
  Client c = d.connect();
  auto r = generate(c, 1, ids_prompt({5, 6}), max_tokens(6), {});
  REQUIRE(r.ok());
  CHECK(r->ids == fake_tokens(6, 6));
  CHECK(r->text == " 13 20 27 34 41 48");
  CHECK(r->finished.reason == FinishReason::kLength);

  const std::string cli = env_or_fail("TANDEM_CLIENT_CLI");
  auto [rc, out] = run({cli, "generate", "--socket", d.socket, "--prompt-ids", "5,6",
                        "--max-tokens", "6", "--json"});
  REQUIRE(rc == 0);
  auto j = nlohmann::json::parse(out);
  CHECK(j["token_ids"] == fake_tokens(6, 6));
  CHECK(j["text"] == " 13 20 27 34 41 48");
  CHECK(j["finish_reason"] == "length");
  CHECK(j["usage"]["prompt_tokens"] == 2);
  CHECK(j.contains("timings"));

  auto [rc2, streamed] =
      run({cli, "generate", "--socket", d.socket, "--prompt-ids", "5,6", "--max-tokens", "6"});
  CHECK(rc2 == 0);
  CHECK(streamed.find(" 13 20 27 34 41 48") == 0);

  auto [rc3, status] = run({cli, "status", "--socket", d.socket, "--json"});
  REQUIRE(rc3 == 0);
  auto s = nlohmann::json::parse(status);
  CHECK(s["state"] == "serving");
  CHECK(s["pools"][0]["used_pages"] == 0);
  CHECK(s["pools"][0]["free_pages"] == 4096);
  CHECK(s["finished"].get<int>() >= 3);  // warm-up + the two above

  auto [rc4, health] = run({cli, "health", "--socket", d.socket});
  CHECK(rc4 == 0);
  CHECK(health == "serving\n");
  auto [rc5, metrics] = run({cli, "metrics", "--socket", d.socket});
  CHECK(rc5 == 0);
  CHECK(metrics.find("tandem:num_requests_running 0") != std::string::npos);  // the engine's
  CHECK(metrics.find("tandem:daemon_kv_pages_used{pool=\"target\"") != std::string::npos);
  auto [rc6, trace] = run({cli, "trace", "--socket", d.socket});
  CHECK(rc6 == 0);
  CHECK(nlohmann::json::parse(trace)["traceEvents"].size() >= 3);
  auto [rc6b, one] = run({cli, "trace", "--socket", d.socket, "--request",
                          std::to_string(j["trace_id"].get<uint64_t>())});
  CHECK(rc6b == 0);
  // One request's trace: the engine's span plus the daemon's own (tokenize, stream writes),
  // all on that request and nothing of any other.
  auto events = nlohmann::json::parse(one)["traceEvents"];
  std::multiset<std::string> names;
  for (const auto& e : events) {
    CHECK(e["tid"] == j["trace_id"]);
    names.insert(e["name"].get<std::string>());
  }
  CHECK(names.count("request") == 1);
  CHECK(names.count("stream_write") >= 1);
  auto [rc6c, last] = run({cli, "trace", "--socket", d.socket, "--last", "2"});
  CHECK(rc6c == 0);
  std::set<uint64_t> last_ids;
  const auto last_events = nlohmann::json::parse(last)["traceEvents"];
  for (const auto& e : last_events) last_ids.insert(e["tid"].get<uint64_t>());
  CHECK(last_ids.size() == 2);

  // chat keeps the conversation: the second turn's prompt holds the first exchange.
  const fs::path in = d.dir / "chat_in.txt";
  std::ofstream(in) << "hello\nagain\n/exit\n";
  auto [rc7, chat] = run(
      {"/bin/sh", "-c", cli + " chat --socket " + d.socket + " --max-tokens 3 < " + in.string()});
  CHECK(rc7 == 0);
  // "user: hello\n" ends in '\n' (10): tokens 17 24 31; turn two ends the same way.
  CHECK(chat == " 17 24 31\n 17 24 31\n");
  CHECK(d.stop() == 0);
}

TEST_CASE("16 concurrent clients each get their own tokens") {
  Daemon d;
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 16; ++i) {
    clients.emplace_back([&, i] {
      auto c = Client::connect(d.socket);
      if (!c.ok()) return;
      bool all = true;
      for (int k = 0; k < 3; ++k) {
        auto r = generate(*c, uint64_t(k + 1), ids_prompt({i, 100 + i}), max_tokens(40 + i), {});
        all = all && r.ok() && r->ids == fake_tokens(100 + i, 40 + i);
      }
      if (all) ++ok;
    });
  }
  for (auto& t : clients) t.join();
  CHECK(ok == 16);
  Client c = d.connect();
  CHECK(pages_return_to_zero(c));
  CHECK(d.stop() == 0);
}

TEST_CASE("cancel mid-stream and a killed client both free the request's pages") {
  Daemon d({}, {{"TANDEM_FAKE_STEP_MS", "2"}});
  Client c = d.connect();
  REQUIRE(c.send(encode_generate(7, ids_prompt({1}), max_tokens(50000), true, true)).ok());
  int events = 0;
  for (;;) {
    auto f = c.receive(10000);
    REQUIRE(f.ok());
    if (f->reply->body_type() == wire::ReplyBody::TokenEvent && ++events == 10) {
      REQUIRE(c.send(encode_cancel(8, 7)).ok());
    }
    if (f->reply->body_type() == wire::ReplyBody::Finished) {
      CHECK(f->reply->body_as_Finished()->reason() == wire::FinishReason::Abort);
      CHECK(f->reply->body_as_Finished()->usage()->completion_tokens() >= 10);
      break;
    }
  }
  Client observer = d.connect();
  CHECK(pages_return_to_zero(observer));

  // A `tandem generate` process killed mid-stream.
  const fs::path log = d.dir / "killed.txt";
  Process victim({env_or_fail("TANDEM_CLIENT_CLI"), "generate", "--socket", d.socket,
                  "--prompt-ids", "1,2,3", "--max-tokens", "50000"},
                 log);
  bool holding = false;
  for (int i = 0; i < 1000 && !holding; ++i) {
    holding = used_pages(observer) > 0;
    if (!holding) std::this_thread::sleep_for(5ms);
  }
  REQUIRE(holding);
  victim.signal(SIGKILL);
  CHECK(victim.wait_exit(10s) == -SIGKILL);
  CHECK(pages_return_to_zero(observer));
  auto st = run({env_or_fail("TANDEM_CLIENT_CLI"), "status", "--socket", d.socket, "--json"});
  REQUIRE(st.first == 0);
  CHECK(nlohmann::json::parse(st.second)["pools"][0]["used_pages"] == 0);
  CHECK(d.stop() == 0);
}

TEST_CASE("garbage, a huge size prefix, a truncated frame, a failing frame: daemon stays up") {
  Daemon d;
  auto raw_connect = [&] {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, d.socket.c_str());
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    return fd;
  };
  SUBCASE("garbage bytes") {
    const int fd = raw_connect();
    std::vector<uint8_t> junk(1000);
    for (size_t i = 0; i < junk.size(); ++i) junk[i] = uint8_t(i * 37 + 11);
    send_raw(fd, junk);
    CHECK(closed_by_daemon(fd));
    close(fd);
  }
  SUBCASE("a size prefix of 4 GiB") {
    const int fd = raw_connect();
    send_raw(fd, {0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3});
    CHECK(closed_by_daemon(fd));
    close(fd);
  }
  SUBCASE("a size prefix over --max-frame-bytes (4 MiB)") {
    const int fd = raw_connect();
    send_raw(fd, {0x01, 0x00, 0x40, 0x00});
    CHECK(closed_by_daemon(fd));
    close(fd);
  }
  SUBCASE("a truncated frame, then the client goes away") {
    const int fd = raw_connect();
    Frame f = encode_generate(1, ids_prompt({1, 2}), max_tokens(4), true, true);
    send_raw(fd, std::vector<uint8_t>(f.data(), f.data() + f.size() / 2));
    close(fd);
  }
  SUBCASE("a frame that fails verification is answered with Error{protocol}") {
    Client c = d.connect();
    Frame f = encode_generate(1, ids_prompt({1, 2}), max_tokens(4), true, true);
    // Point the root table's vtable offset far outside the buffer.
    f.data()[kPrefixBytes + 8 + 0] = 0x00;
    std::vector<uint8_t> bytes(f.data(), f.data() + f.size());
    uint32_t root = 0;
    std::memcpy(&root, bytes.data() + kPrefixBytes, 4);
    const int32_t bad_vtable = 0x7FFFFFF0;
    std::memcpy(bytes.data() + kPrefixBytes + root, &bad_vtable, 4);
    send_raw(c.fd(), bytes);
    auto reply = c.receive(10000);
    REQUIRE(reply.ok());
    REQUIRE(reply->reply->body_type() == wire::ReplyBody::ErrorInfo);
    CHECK(reply->reply->body_as_ErrorInfo()->code() == wire::ErrorCode::Protocol);
  }
  CHECK(d.healthy());
  Client c = d.connect();
  auto r = generate(c, 1, ids_prompt({3}), max_tokens(3), {});
  REQUIRE(r.ok());
  CHECK(r->ids == fake_tokens(3, 3));
  CHECK(d.stop() == 0);
  CHECK(d.process->log().find("stopped cleanly") != std::string::npos);
}

TEST_CASE("a slow reader does not stall other clients") {
  Daemon d({"--max-output-buffer-bytes", "8192"}, {{"TANDEM_FAKE_STEP_MS", "0"}});
  Client slow = d.connect();
  REQUIRE(slow.send(encode_generate(1, ids_prompt({1}), max_tokens(60000), true, true)).ok());
  std::this_thread::sleep_for(100ms);  // its socket buffer fills; the daemon stops writing to it
  for (int i = 0; i < 5; ++i) {
    Client fast = d.connect();
    const auto t0 = std::chrono::steady_clock::now();
    auto r = generate(fast, 1, ids_prompt({2}), max_tokens(100), {});
    REQUIRE(r.ok());
    CHECK(r->ids.size() == 100);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  }
  size_t tokens = 0;
  for (;;) {
    auto f = slow.receive(30000);
    REQUIRE(f.ok());
    if (f->reply->body_type() == wire::ReplyBody::TokenEvent) {
      tokens += f->reply->body_as_TokenEvent()->ids()->size();
    }
    if (f->reply->body_type() == wire::ReplyBody::Finished) break;
  }
  CHECK(tokens == 60000);  // coalesced, never dropped
  CHECK(d.stop() == 0);
}

TEST_CASE("SIGTERM under load drains, aborts what outlives --shutdown-timeout, exits 0") {
  Daemon d({"--shutdown-timeout", "0.5"}, {{"TANDEM_FAKE_STEP_MS", "2"}});
  std::vector<Client> clients;
  for (int i = 0; i < 8; ++i) {
    clients.push_back(d.connect());
    // Even clients finish within the timeout, odd ones cannot.
    const int32_t n = i % 2 == 0 ? 30 : 50000;
    REQUIRE(
        clients.back().send(encode_generate(1, ids_prompt({i}), max_tokens(n), true, true)).ok());
    REQUIRE(clients.back().receive(10000).ok());  // Accepted
  }
  d.process->signal(SIGTERM);
  std::this_thread::sleep_for(50ms);
  // Not accepting any more.
  CHECK_FALSE(Client::connect(d.socket).ok());
  for (int i = 0; i < 8; ++i) {
    wire::FinishReason reason = wire::FinishReason::Error;
    for (;;) {
      auto f = clients[i].receive(20000);
      if (!f.ok()) break;
      if (f->reply->body_type() == wire::ReplyBody::Finished) {
        reason = f->reply->body_as_Finished()->reason();
      }
    }
    CHECK(reason == (i % 2 == 0 ? wire::FinishReason::Length : wire::FinishReason::Abort));
  }
  CHECK(d.process->wait_exit(30s) == 0);
  const std::string log = d.process->log();
  CHECK(log.find("stopped cleanly") != std::string::npos);
  CHECK(log.find("handle still open") == std::string::npos);
  CHECK_FALSE(fs::exists(d.socket));
}

// A datagram socket standing in for systemd's $NOTIFY_SOCKET.
struct NotifySocket {
  std::string path = (scratch_dir() / "notify.sock").string();
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  NotifySocket() {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path.c_str());
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    timeval tv{0, 50000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~NotifySocket() { close(fd); }
  // Everything sent within `window` (watchdog pings never let the socket go quiet).
  std::string collect(std::chrono::milliseconds window) {
    std::string all;
    char buf[4096];
    const auto end = std::chrono::steady_clock::now() + window;
    while (std::chrono::steady_clock::now() < end) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n > 0) all.append(buf, size_t(n)).push_back('\n');
    }
    return all;
  }
};

TEST_CASE("systemd notify: STATUS while loading, READY=1 after warm-up, WATCHDOG=1, STOPPING=1") {
  NotifySocket notify;
  Daemon d({}, {{"NOTIFY_SOCKET", notify.path}, {"WATCHDOG_USEC", "200000"}},
           /*watchdog_pid=*/true);
  std::string got = notify.collect(400ms);
  const size_t loading = got.find("STATUS=loading");
  const size_t ready = got.find("READY=1");
  REQUIRE(loading != std::string::npos);
  REQUIRE(ready != std::string::npos);
  CHECK(loading < ready);
  CHECK(got.find("STATUS=warming up") < ready);
  CHECK(got.find("WATCHDOG=1", ready) != std::string::npos);
  CHECK(d.stop() == 0);
  CHECK(notify.collect(100ms).find("STOPPING=1") != std::string::npos);
}

TEST_CASE("socket activation through systemd-socket-activate") {
  if (access("/usr/bin/systemd-socket-activate", X_OK) != 0) {
    MESSAGE("systemd-socket-activate not installed; skipped");
    return;
  }
  const fs::path dir = scratch_dir();
  const std::string sock = (dir / "activated.sock").string();
  Process p({"/usr/bin/systemd-socket-activate", "-l", sock, env_or_fail("TANDEMD_FAKE"), "--model",
             "/models/fake"},
            dir / "log.txt");
  bool up = false;
  for (int i = 0; i < 500 && !up; ++i) {
    if (auto c = Client::connect(sock); c.ok()) {
      auto r = generate(*c, 1, ids_prompt({4}), max_tokens(2), {});
      up = r.ok() && r->ids == fake_tokens(4, 2);
    }
    if (!up) std::this_thread::sleep_for(10ms);
  }
  CHECK(up);
  p.signal(SIGTERM);
  CHECK(p.wait_exit(30s) == 0);
  CHECK(p.log().find("socket activation") != std::string::npos);
}

TEST_CASE("settings: --print-config, bad flags, an unusable socket") {
  const std::string fake = env_or_fail("TANDEMD_FAKE");
  auto [rc, toml] = run({fake, "--model", "/m", "--kv-pages", "12", "--print-config"});
  CHECK(rc == 0);
  CHECK(toml.find("kv_pages = 12") != std::string::npos);
  CHECK(toml.find("model = '/m'") != std::string::npos);
  CHECK(run({fake, "--print-config"}).first == 2);  // no model
  CHECK(run({fake, "--model", "/m", "--max-connections", "many"}).first == 2);
  CHECK(run({fake, "--model", "/m", "--socket", "/nonexistent-dir/x.sock"}).first == 1);
}

TEST_CASE("the connection limit answers Error{overloaded} and keeps serving") {
  Daemon d({"--max-connections", "2"});
  Client a = d.connect();
  Client b = d.connect();
  REQUIRE(query_status(a).ok());
  REQUIRE(query_status(b).ok());
  Client third = d.connect();
  auto reply = third.receive(10000);
  REQUIRE(reply.ok());
  REQUIRE(reply->reply->body_type() == wire::ReplyBody::ErrorInfo);
  CHECK(reply->reply->body_as_ErrorInfo()->code() == wire::ErrorCode::Overloaded);
  CHECK(query_status(a).ok());
  CHECK(d.stop() == 0);
}

}  // namespace
}  // namespace tandem::daemon
