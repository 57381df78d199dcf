#include "systemd.h"

#include <sys/socket.h>
#include <systemd/sd-daemon.h>

namespace tandem::daemon {

void sd_notify_line(const std::string& line) {
  sd_notify(0, line.c_str());
}

Result<int> activated_socket() {
  const int n = sd_listen_fds(/*unset_environment=*/1);
  if (n < 0) return make_error(ErrorCode::kIo, "sd_listen_fds failed");
  if (n == 0) return -1;
  if (n > 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "socket activation passed " + std::to_string(n) +
                          " sockets; tandemd.socket must list exactly one ListenStream");
  }
  const int fd = SD_LISTEN_FDS_START;
  if (sd_is_socket_unix(fd, SOCK_STREAM, /*listening=*/1, nullptr, 0) <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the activated socket is not a listening Unix stream socket");
  }
  return fd;
}

uint64_t watchdog_interval_ms() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) <= 0) return 0;
  return usec / 2000;
}

}  // namespace tandem::daemon
