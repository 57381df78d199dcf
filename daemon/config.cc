#include "config.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include <toml++/toml.h>

namespace tandem::daemon {

std::vector<Setting> settings_of(DaemonConfig& c) {
  EngineOptions& e = c.engine;
  return {
      {"model", &e.model_dir, "Hugging Face model directory (required)"},
      {"draft", &e.draft_dir, "Draft model directory; empty = no speculative decoding"},
      {"device", &c.device, "cpu or cuda:N for both stages; empty = the stage settings"},
      {"prefill_device", &e.prefill_device, "Device of the prefill stage"},
      {"decode_device", &e.decode_device, "Device of the decode stage"},
      {"kv_transport", &e.kv_transport,
       "KV shipping between stages: auto, local, peer, nccl, host_staged"},
      {"kv_pages", &e.kv_pages, "KV pages per pool; 0 = size from free memory"},
      {"page_size", &e.page_size, "Tokens per KV page"},
      {"gpu_memory_utilization", &e.gpu_memory_utilization, "Fraction of GPU memory to use"},
      {"max_num_seqs", &e.max_num_seqs, "Running sequences on the decode stage"},
      {"max_num_batched_tokens", &e.max_num_batched_tokens, "Tokens per engine step"},
      {"prefill_chunk", &e.prefill_chunk, "Prompt tokens per prefill chunk"},
      {"max_model_len", &e.max_model_len, "Longest sequence; 0 = the model's"},
      {"max_queue", &e.max_queue, "Waiting requests before new ones are refused"},
      {"max_cuda_graphs", &e.max_cuda_graphs,
       "CUDA graphs kept per GPU runner; past it the least recently used is released"},
      {"scheduling_policy", &e.scheduling_policy, "Admission order and preemption victims: fcfs"},
      {"threads", &e.threads, "CPU runner threads; 0 = all cores"},
      {"quantization", &e.quantization,
       "fp8: quantize a float checkpoint's Linears at load; empty = as stored"},
      {"draft_quantization", &e.draft_quantization, "fp8: the same for the draft model"},
      {"spec", &e.spec, "Speculative decoding with the draft model"},
      {"draft_max", &e.draft_max, "Most tokens the draft proposes per step"},
      {"draft_min", &e.draft_min, "Fewest tokens proposed when speculating at all"},
      {"draft_vocab", &e.draft_vocab, "The draft proposes only ids below this; 0 = all"},
      {"spec_max_batch", &e.spec_max_batch, "No speculation above this decode batch"},
      {"prefix_caching", &e.prefix_caching,
       "Share the KV pages of cached prompt prefixes (on|off)"},
      {"async_decode", &e.async_decode,
       "Launch a greedy decode batch's next step before reading its tokens (on|off)"},
      {"socket", &c.socket_path, "Unix socket path; empty = $RUNTIME_DIRECTORY/tandemd.sock"},
      {"max_connections", &c.max_connections, "Client connections at once"},
      {"max_frame_bytes", &c.max_frame_bytes, "Largest request frame accepted"},
      {"max_requests_per_connection", &c.max_requests_per_connection,
       "Requests in flight per connection"},
      {"max_output_buffer_bytes", &c.max_output_buffer_bytes,
       "Unsent reply bytes per connection before token events are coalesced"},
      {"shutdown_timeout", &c.shutdown_timeout_s,
       "Seconds in-flight requests may run after SIGTERM before they are aborted"},
      {"log_level", &c.log_level, "trace, debug, info, warn, error"},
      {"warmup", &c.warmup, "Run one 1-token request before reporting ready"},
      {"trace", &e.trace, "Per-request stage spans and the trace ring (on/off)"},
      {"metrics_listen", &c.metrics_listen,
       "HOST:PORT for an HTTP GET /metrics endpoint (Prometheus); empty = off"},
  };
}

std::string flag_name(const Setting& s) {
  std::string f = std::string("--") + s.key;
  for (char& ch : f) {
    if (ch == '_') ch = '-';
  }
  return f;
}

std::string env_name(const Setting& s) {
  std::string e = std::string("TANDEM_") + s.key;
  for (char& ch : e) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  return e;
}

namespace {

Error bad_value(const Setting& s, const std::string& text, const std::string& source,
                const char* want) {
  return make_error(ErrorCode::kInvalidArgument,
                    source + ": '" + text + "' is not " + want + " (" + s.key + ")");
}

}  // namespace

Status set_from_text(const Setting& s, const std::string& text, const std::string& source) {
  struct Visitor {
    const Setting& s;
    const std::string& text;
    const std::string& source;
    Status operator()(std::string* p) const {
      *p = text;
      return Status::Ok();
    }
    Status operator()(int32_t* p) const {
      int64_t v = 0;
      Status st = (*this)(&v);
      if (!st) return st;
      if (v < INT32_MIN || v > INT32_MAX) return bad_value(s, text, source, "a 32-bit integer");
      *p = int32_t(v);
      return Status::Ok();
    }
    Status operator()(int64_t* p) const {
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno != 0) {
        return bad_value(s, text, source, "an integer");
      }
      *p = v;
      return Status::Ok();
    }
    Status operator()(double* p) const {
      errno = 0;
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || errno != 0) return bad_value(s, text, source, "a number");
      *p = v;
      return Status::Ok();
    }
    Status operator()(bool* p) const {
      if (text == "true" || text == "1" || text == "yes" || text == "on") {
        *p = true;
      } else if (text == "false" || text == "0" || text == "no" || text == "off") {
        *p = false;
      } else {
        return bad_value(s, text, source, "true or false (on or off)");
      }
      return Status::Ok();
    }
  };
  return std::visit(Visitor{s, text, source}, s.target);
}

Status apply_toml_file(DaemonConfig& config, const std::string& path) {
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << path << ":" << e.source().begin.line << ": " << e.description();
    return make_error(ErrorCode::kInvalidArgument, msg.str());
  }
  const std::vector<Setting> settings = settings_of(config);
  for (const auto& [key, node] : table) {
    const Setting* s = nullptr;
    for (const Setting& x : settings) {
      if (key.str() == x.key) s = &x;
    }
    const std::string where = path + ": " + std::string(key.str());
    if (!s) return make_error(ErrorCode::kInvalidArgument, where + " is not a tandemd setting");
    bool ok = true;
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, std::string>) {
            if (auto v = node.value<std::string>())
              *p = *v;
            else
              ok = false;
          } else if constexpr (std::is_same_v<T, bool>) {
            if (auto v = node.value<bool>())
              *p = *v;
            else
              ok = false;
          } else if constexpr (std::is_same_v<T, double>) {
            if (auto v = node.value<double>())
              *p = *v;
            else
              ok = false;
          } else {
            auto v = node.value<int64_t>();
            if (node.is_integer() && v && *v >= std::numeric_limits<T>::min() &&
                *v <= std::numeric_limits<T>::max()) {
              *p = T(*v);
            } else {
              ok = false;
            }
          }
        },
        s->target);
    if (!ok) return make_error(ErrorCode::kInvalidArgument, where + " has the wrong type");
  }
  return Status::Ok();
}

Status apply_environment(DaemonConfig& config) {
  for (const Setting& s : settings_of(config)) {
    const std::string name = env_name(s);
    if (const char* v = std::getenv(name.c_str())) TANDEM_TRY(set_from_text(s, v, name));
  }
  return Status::Ok();
}

Status finalize(DaemonConfig& c) {
  auto invalid = [](const std::string& m) { return make_error(ErrorCode::kInvalidArgument, m); };
  if (c.engine.model_dir.empty()) return invalid("model: no model directory given (--model)");
  if (!c.device.empty()) c.engine.prefill_device = c.engine.decode_device = c.device;
  if (c.socket_path.empty()) c.socket_path = default_socket_path();
  if (c.socket_path.size() >= 108) {  // sizeof(sockaddr_un::sun_path)
    return invalid("socket: path is longer than a Unix socket allows: " + c.socket_path);
  }
  if (c.max_connections < 1) return invalid("max_connections must be at least 1");
  if (c.max_frame_bytes < 64 || c.max_frame_bytes > (int64_t(1) << 30)) {
    return invalid("max_frame_bytes must be in [64, 1 GiB]");
  }
  if (c.max_requests_per_connection < 1) {
    return invalid("max_requests_per_connection must be at least 1");
  }
  if (c.max_output_buffer_bytes < 4096) return invalid("max_output_buffer_bytes must be >= 4096");
  if (c.shutdown_timeout_s < 0) return invalid("shutdown_timeout must not be negative");
  static const char* const kLevels[] = {"trace", "debug", "info", "warn", "error"};
  bool level_ok = false;
  for (const char* l : kLevels) level_ok = level_ok || c.log_level == l;
  if (!level_ok) return invalid("log_level: '" + c.log_level + "' is not a level");
  return Status::Ok();
}

std::string to_toml(DaemonConfig& config) {
  std::ostringstream out;
  out << "# tandemd settings (flag --key-name, environment TANDEM_KEY_NAME)\n";
  for (const Setting& s : settings_of(config)) {
    out << "\n# " << s.help << "\n" << s.key << " = ";
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, std::string>) {
            out << toml::value<std::string>(*p);
          } else if constexpr (std::is_same_v<T, bool>) {
            out << (*p ? "true" : "false");
          } else {
            out << *p;
          }
        },
        s.target);
    out << "\n";
  }
  return out.str();
}

}  // namespace tandem::daemon
