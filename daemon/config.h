// tandemd settings: one declarative list. Every setting has a default (the member initialiser),
// a flag (--key-name), an environment variable (TANDEM_KEY_NAME) and a key in the TOML file
// (key_name). Later sources win: default < TOML file < environment < flag. Validated once.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "socket_path.h"

namespace tandem::daemon {

struct DaemonConfig {
  EngineOptions engine;
  std::string device;       // sets both stage devices when not empty
  std::string socket_path;  // empty = $RUNTIME_DIRECTORY or $XDG_RUNTIME_DIR default
  int32_t max_connections = 256;
  int64_t max_frame_bytes = 4 << 20;
  int32_t max_requests_per_connection = 256;
  int64_t max_output_buffer_bytes = 1 << 20;  // per connection, before token events coalesce
  double shutdown_timeout_s = 30;
  std::string log_level = "info";
  bool warmup = true;          // one 1-token request before READY=1
  std::string metrics_listen;  // HOST:PORT of an HTTP GET /metrics endpoint; empty = off
};

struct Setting {
  const char* key;  // TOML key; the flag and the environment variable derive from it
  std::variant<std::string*, int32_t*, int64_t*, double*, bool*> target;
  const char* help;
};

// The list, bound to `config`'s members.
std::vector<Setting> settings_of(DaemonConfig& config);
std::string flag_name(const Setting& s);  // "--max-connections"
std::string env_name(const Setting& s);   // "TANDEM_MAX_CONNECTIONS"

// Sets one setting from text (a flag or environment value); the error names `source`.
Status set_from_text(const Setting& s, const std::string& text, const std::string& source);
// Reads the TOML file; unknown keys and wrong types are errors naming the file and key.
Status apply_toml_file(DaemonConfig& config, const std::string& path);
// Environment variables that are set (getenv).
Status apply_environment(DaemonConfig& config);
// Fills derived values (device, default socket) and checks ranges.
Status finalize(DaemonConfig& config);
// `tandemd --print-config`: a TOML file that reproduces `config`.
std::string to_toml(DaemonConfig& config);

}  // namespace tandem::daemon
