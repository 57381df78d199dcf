// tandemd around the FakeEngine: the real daemon (settings, socket, systemd glue, drain) for
// integration tests that need no model. TANDEM_FAKE_STEP_MS and TANDEM_FAKE_PAGES shape the
// engine; `--model` is required as for tandemd but only names the fake.
#include <cstdlib>
#include <string>

#include "daemon/daemon_main.h"
#include "unit/daemon/fake_engine.h"

namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}
}  // namespace

int main(int argc, char** argv) {
  tandem::daemon::DaemonHooks hooks;
  hooks.create_engine =
      [](const tandem::EngineOptions&) -> tandem::Result<std::unique_ptr<tandem::Engine>> {
    tandem::testing::FakeEngineOptions options;
    options.step_ms = env_int("TANDEM_FAKE_STEP_MS", 1);
    options.total_pages = env_int("TANDEM_FAKE_PAGES", 4096);
    return std::unique_ptr<tandem::Engine>(new tandem::testing::FakeEngine(options));
  };
  hooks.prompt_builder = [](const tandem::Engine&) {
    return tandem::testing::fake_prompt_builder();
  };
  return tandem::daemon::run_daemon(argc, argv, hooks);
}
