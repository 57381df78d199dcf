// Where tandemd listens when no socket is configured; clients look in the same place.
#pragma once

#include <string>

namespace tandem::daemon {

// $RUNTIME_DIRECTORY/tandemd.sock (systemd's RuntimeDirectory=), else
// $XDG_RUNTIME_DIR/tandemd.sock, else /run/tandem/tandemd.sock.
std::string default_socket_path();

// For clients: $TANDEM_SOCKET when set, else default_socket_path().
std::string client_socket_path();

}  // namespace tandem::daemon
