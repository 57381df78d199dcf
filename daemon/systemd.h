// The parts of systemd tandemd uses: readiness/status notifications and socket activation.
// Outside systemd (no $NOTIFY_SOCKET, no $LISTEN_FDS) every call is a harmless no-op.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"

namespace tandem::daemon {

// sd_notify(3) with one line, e.g. "READY=1", "STATUS=loading weights".
void sd_notify_line(const std::string& line);

// The listening socket systemd passed (sd_listen_fds), -1 when not socket-activated. More than
// one socket, or one that is not a listening Unix stream socket, is an error.
Result<int> activated_socket();

// Half the watchdog timeout in ms when systemd expects WATCHDOG=1 pings from us, else 0.
uint64_t watchdog_interval_ms();

}  // namespace tandem::daemon
