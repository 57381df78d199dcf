// The whole of tandemd behind main(): settings, logging, engine start-up and warm-up, systemd
// notifications, the server loop and a clean exit. The engine comes from a hook so the
// integration tests can run the same daemon around a scripted engine.
#pragma once

#include <functional>
#include <memory>

#include "core/error.h"
#include "engine/engine.h"
#include "server.h"

namespace tandem::daemon {

struct DaemonHooks {
  std::function<Result<std::unique_ptr<Engine>>(const EngineOptions&)> create_engine;
  std::function<PromptBuilder(const Engine&)> prompt_builder;
};

// Exit code: 0 after a clean stop (drained, every handle closed, uv_loop_close() == 0); 1 when
// settings, the model or the socket are unusable; 2 for command-line errors.
int run_daemon(int argc, char** argv, const DaemonHooks& hooks);

}  // namespace tandem::daemon
