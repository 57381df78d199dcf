#include "daemon_main.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "config.h"
#include "model/config.h"
#include "systemd.h"
#include "tandem_build_config.h"

namespace tandem::daemon {

namespace {

struct ParsedArgs {
  DaemonConfig config;
  bool print_config = false;
};

// Flags, then environment and the TOML file beneath them (default < file < env < flag).
std::optional<int> parse_args(int argc, char** argv, ParsedArgs& out) {
  CLI::App app{"tandemd: serve LLMs over a Unix socket"};
  app.set_version_flag("--version", TANDEM_VERSION);
  std::string config_file;
  app.add_option("--config", config_file, "TOML settings file (also $TANDEM_CONFIG)");
  app.add_flag("--print-config", out.print_config, "Print the effective settings as TOML; exit");
  DaemonConfig scratch;
  const std::vector<Setting> settings = settings_of(scratch);
  std::vector<std::string> raw(settings.size());
  std::vector<CLI::Option*> options;
  for (size_t i = 0; i < settings.size(); ++i) {
    options.push_back(app.add_option(flag_name(settings[i]), raw[i], settings[i].help)
                          ->envname("")  // environment is applied below, with its own name
                          ->type_name(std::holds_alternative<bool*>(settings[i].target) ? "BOOL"
                                      : std::holds_alternative<std::string*>(settings[i].target)
                                          ? "TEXT"
                                          : "NUMBER"));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto fail = [](const Error& e) {
    std::fprintf(stderr, "tandemd: %s\n", e.message.c_str());
    return std::optional<int>(2);
  };
  if (config_file.empty()) {
    if (const char* env = std::getenv("TANDEM_CONFIG")) config_file = env;
  }
  if (!config_file.empty()) {
    if (Status st = apply_toml_file(out.config, config_file); !st) return fail(st.error());
  }
  if (Status st = apply_environment(out.config); !st) return fail(st.error());
  const std::vector<Setting> bound = settings_of(out.config);
  for (size_t i = 0; i < bound.size(); ++i) {
    if (options[i]->count() == 0) continue;
    if (Status st = set_from_text(bound[i], raw[i], flag_name(bound[i])); !st) {
      return fail(st.error());
    }
  }
  if (Status st = finalize(out.config); !st) return fail(st.error());
  return std::nullopt;
}

void setup_logging(const DaemonConfig& config) {
  // Under systemd the journal adds time and unit: plain lines read best there.
  if (std::getenv("JOURNAL_STREAM")) {
    spdlog::set_pattern("%l: %v");
  } else {
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [tandemd] [%l] %v");
  }
  spdlog::set_level(spdlog::level::from_str(config.log_level));
}

// Keeps systemd's start timeout from running out while weights load.
class LoadingHeartbeat {
 public:
  LoadingHeartbeat() {
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!done_) {
        sd_notify_line("EXTEND_TIMEOUT_USEC=30000000");
        cv_.wait_for(lock, std::chrono::seconds(10));
      }
    });
  }
  ~LoadingHeartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// One greedy token through every stage before READY=1: kernels are loaded and the pipeline works.
class WarmupObserver final : public EngineObserver {
 public:
  void on_tokens(TokenEvent) override {}
  void on_finished(FinishEvent event) override {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = std::move(event);
    cv_.notify_all();
  }
  FinishEvent wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return finished_.has_value(); });
    return *finished_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<FinishEvent> finished_;
};

Status warm_up(Engine& engine) {
  const ModelConfig& model = engine.model_config();
  GenerateInput input;
  input.prompt_ids = {model.bos_token_id.value_or(0)};
  input.sampling.temperature = 0.0f;
  input.sampling.max_tokens = 1;
  input.sampling.ignore_eos = true;
  WarmupObserver observer;
  // Request id 0: the server numbers client requests from 1.
  TANDEM_TRY(engine.submit(0, std::move(input), &observer));
  FinishEvent fin = observer.wait();
  if (fin.reason == FinishReason::kError) {
    return fin.error.value_or(make_error(ErrorCode::kInternal, "warm-up failed"));
  }
  return Status::Ok();
}

void log_open_handles(uv_loop_t* loop) {
  uv_walk(
      loop,
      [](uv_handle_t* h, void*) {
        spdlog::error("handle still open at exit: {}{}", uv_handle_type_name(h->type),
                      uv_is_closing(h) ? " (closing)" : "");
      },
      nullptr);
}

}  // namespace

int run_daemon(int argc, char** argv, const DaemonHooks& hooks) {
  std::signal(SIGPIPE, SIG_IGN);  // a vanished client is a write error, not a signal
  ParsedArgs args;
  if (auto code = parse_args(argc, argv, args)) return *code;
  DaemonConfig& config = args.config;
  if (args.print_config) {
    std::fputs(to_toml(config).c_str(), stdout);
    return 0;
  }
  setup_logging(config);

  auto listen_fd = activated_socket();
  if (!listen_fd) {
    spdlog::error("{}", listen_fd.error().message);
    return 1;
  }

  spdlog::info("tandemd {} loading {} (prefill {}, decode {})", TANDEM_VERSION,
               config.engine.model_dir, config.engine.prefill_device, config.engine.decode_device);
  if (!config.engine.draft_dir.empty()) {
    const EngineOptions& e = config.engine;
    spdlog::info("draft {}: speculation {}, {}-{} tokens a step, {}", e.draft_dir,
                 e.spec ? "on" : "off", e.draft_min, e.draft_max,
                 e.draft_vocab > 0 ? "ids below " + std::to_string(e.draft_vocab) : "every id");
  }
  sd_notify_line("STATUS=loading " + config.engine.model_dir);
  std::unique_ptr<Engine> engine;
  {
    LoadingHeartbeat heartbeat;
    auto created = hooks.create_engine(config.engine);
    if (!created) {
      spdlog::error("{}", created.error().to_string());
      sd_notify_line("STATUS=failed: " + created.error().message);
      return 1;
    }
    engine = std::move(created).value();
    engine->start();
    if (config.warmup) {
      sd_notify_line("STATUS=warming up");
      if (Status st = warm_up(*engine); !st) {
        spdlog::error("warm-up: {}", st.error().to_string());
        engine->stop(0);
        return 1;
      }
    }
  }

  ServerOptions options;
  options.socket_path = config.socket_path;
  options.listen_fd = *listen_fd;
  options.max_connections = config.max_connections;
  options.max_frame_bytes = uint32_t(config.max_frame_bytes);
  options.max_requests_per_connection = config.max_requests_per_connection;
  options.max_output_buffer_bytes = config.max_output_buffer_bytes;
  options.shutdown_timeout_s = config.shutdown_timeout_s;
  options.model_name = std::filesystem::path(config.engine.model_dir).filename().string();
  options.default_max_tokens = engine->generation_defaults().max_new_tokens.value_or(16);
  options.watchdog_interval_ms = watchdog_interval_ms();
  options.metrics_listen = config.metrics_listen;

  uv_loop_t loop;
  uv_loop_init(&loop);
  int exit_code = 0;
  {
    Server server(&loop, *engine, hooks.prompt_builder(*engine), sd_notify_line, options);
    if (Status st = server.start(); !st) {
      spdlog::error("{}", st.error().to_string());
      exit_code = 1;
      server.begin_shutdown();  // closes what start() opened
    } else {
      sd_notify_line("READY=1");
      sd_notify_line("STATUS=serving on " + config.socket_path);
      spdlog::info("ready");
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    engine->stop(0);
  }
  const int close_rc = uv_loop_close(&loop);
  if (close_rc != 0) {
    log_open_handles(&loop);
    spdlog::error("uv_loop_close: {}", uv_strerror(close_rc));
    return 1;
  }
  spdlog::info("stopped cleanly");
  return exit_code;
}

}  // namespace tandem::daemon
