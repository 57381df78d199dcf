#include "socket_path.h"

#include <cstdlib>

namespace tandem::daemon {

std::string default_socket_path() {
  if (const char* dir = std::getenv("RUNTIME_DIRECTORY"); dir && *dir) {
    std::string first(dir);
    first = first.substr(0, first.find(':'));  // systemd lists several, colon-separated
    return first + "/tandemd.sock";
  }
  if (const char* dir = std::getenv("XDG_RUNTIME_DIR"); dir && *dir) {
    return std::string(dir) + "/tandemd.sock";
  }
  return "/run/tandem/tandemd.sock";
}

std::string client_socket_path() {
  if (const char* path = std::getenv("TANDEM_SOCKET"); path && *path) return path;
  return default_socket_path();
}

}  // namespace tandem::daemon
