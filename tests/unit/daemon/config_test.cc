// tandemd settings: one list, four sources, a fixed precedence, errors that name the source.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "daemon/config.h"

namespace tandem::daemon {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

const Setting& find(const std::vector<Setting>& list, const std::string& key) {
  for (const Setting& s : list) {
    if (key == s.key) return s;
  }
  FAIL("no setting " << key);
  return list.front();
}

TEST_CASE("every setting has a unique key, a flag and an environment variable") {
  DaemonConfig c;
  auto list = settings_of(c);
  std::set<std::string> keys;
  for (const Setting& s : list) CHECK(keys.insert(s.key).second);
  CHECK(flag_name(find(list, "max_frame_bytes")) == "--max-frame-bytes");
  CHECK(env_name(find(list, "shutdown_timeout")) == "TANDEM_SHUTDOWN_TIMEOUT");
  CHECK(keys.count("socket"));
  CHECK(keys.count("kv_pages"));
}

TEST_CASE("the TOML file sets values; unknown keys and wrong types are named") {
  DaemonConfig c;
  const auto path = write_temp("tandemd_cfg_ok.toml",
                               "model = \"/m\"\nkv_pages = 64\nshutdown_timeout = 2\n"
                               "warmup = false\nsocket = \"/tmp/x.sock\"\n");
  REQUIRE(apply_toml_file(c, path).ok());
  CHECK(c.engine.model_dir == "/m");
  CHECK(c.engine.kv_pages == 64);
  CHECK(c.shutdown_timeout_s == 2.0);  // an integer is a fine number of seconds
  CHECK_FALSE(c.warmup);

  DaemonConfig d;
  auto unknown = apply_toml_file(d, write_temp("tandemd_cfg_bad.toml", "modle = \"/m\"\n"));
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message.find("modle") != std::string::npos);
  auto type = apply_toml_file(d, write_temp("tandemd_cfg_type.toml", "kv_pages = \"many\"\n"));
  REQUIRE_FALSE(type.ok());
  CHECK(type.error().message.find("kv_pages") != std::string::npos);
  auto syntax = apply_toml_file(d, write_temp("tandemd_cfg_syntax.toml", "kv_pages = = 3\n"));
  CHECK_FALSE(syntax.ok());
}

TEST_CASE("environment beats the file; text values are checked") {
  DaemonConfig c;
  REQUIRE(apply_toml_file(c, write_temp("tandemd_cfg_env.toml", "max_connections = 5\n")).ok());
  setenv("TANDEM_MAX_CONNECTIONS", "9", 1);
  REQUIRE(apply_environment(c).ok());
  CHECK(c.max_connections == 9);
  setenv("TANDEM_MAX_CONNECTIONS", "nine", 1);
  auto bad = apply_environment(c);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("TANDEM_MAX_CONNECTIONS") != std::string::npos);
  unsetenv("TANDEM_MAX_CONNECTIONS");

  auto list = settings_of(c);
  CHECK_FALSE(
      set_from_text(find(list, "max_connections"), "99999999999", "--max-connections").ok());
  CHECK_FALSE(set_from_text(find(list, "warmup"), "maybe", "--warmup").ok());
  CHECK(set_from_text(find(list, "warmup"), "false", "--warmup").ok());
}

TEST_CASE("finalize derives the socket and device and rejects impossible values") {
  DaemonConfig c;
  CHECK_FALSE(finalize(c).ok());  // no model
  c.engine.model_dir = "/m";
  c.device = "cuda:1";
  setenv("RUNTIME_DIRECTORY", "/run/tandem:/run/other", 1);
  REQUIRE(finalize(c).ok());
  CHECK(c.socket_path == "/run/tandem/tandemd.sock");
  CHECK(c.engine.prefill_device == "cuda:1");
  CHECK(c.engine.decode_device == "cuda:1");
  unsetenv("RUNTIME_DIRECTORY");
  DaemonConfig d;
  d.engine.model_dir = "/m";
  d.max_frame_bytes = 10;
  CHECK_FALSE(finalize(d).ok());
  d.max_frame_bytes = 1 << 20;
  d.log_level = "chatty";
  CHECK_FALSE(finalize(d).ok());
}

TEST_CASE("--print-config output reads back to the same settings") {
  DaemonConfig c;
  c.engine.model_dir = "/models/q \"x\"";
  c.engine.kv_pages = 17;
  c.shutdown_timeout_s = 2.5;
  c.warmup = false;
  const std::string toml = to_toml(c);
  DaemonConfig back;
  REQUIRE(apply_toml_file(back, write_temp("tandemd_cfg_print.toml", toml)).ok());
  CHECK(back.engine.model_dir == c.engine.model_dir);
  CHECK(back.engine.kv_pages == 17);
  CHECK(back.shutdown_timeout_s == 2.5);
  CHECK_FALSE(back.warmup);
  CHECK(back.shutdown_timeout_s == c.shutdown_timeout_s);
}

}  // namespace
}  // namespace tandem::daemon

namespace tandem::daemon {
namespace {

TEST_CASE("--prefix-caching: on by default, off by flag text, environment or file") {
  DaemonConfig c;
  CHECK(c.engine.prefix_caching);
  auto list = settings_of(c);
  CHECK(flag_name(find(list, "prefix_caching")) == "--prefix-caching");
  CHECK(env_name(find(list, "prefix_caching")) == "TANDEM_PREFIX_CACHING");
  REQUIRE(set_from_text(find(list, "prefix_caching"), "off", "--prefix-caching").ok());
  CHECK_FALSE(c.engine.prefix_caching);
  REQUIRE(set_from_text(find(list, "prefix_caching"), "on", "--prefix-caching").ok());
  CHECK(c.engine.prefix_caching);
  auto bad = set_from_text(find(list, "prefix_caching"), "sometimes", "--prefix-caching");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("--prefix-caching") != std::string::npos);
  setenv("TANDEM_PREFIX_CACHING", "off", 1);
  REQUIRE(apply_environment(c).ok());
  CHECK_FALSE(c.engine.prefix_caching);
  unsetenv("TANDEM_PREFIX_CACHING");
  DaemonConfig f;
  REQUIRE(
      apply_toml_file(f, write_temp("tandemd_cfg_prefix.toml", "prefix_caching = false\n")).ok());
  CHECK_FALSE(f.engine.prefix_caching);
}

}  // namespace
}  // namespace tandem::daemon
