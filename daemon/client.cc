#include "client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tandem::daemon {

namespace {

Error io_error(const std::string& what) {
  return make_error(ErrorCode::kIo, what + ": " + std::strerror(errno));
}

}  // namespace

Result<Client> Client::connect(const std::string& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return make_error(ErrorCode::kInvalidArgument, "socket path too long: " + socket_path);
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return io_error("socket");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Error e = io_error("connecting to tandemd at " + socket_path);
    ::close(fd);
    return e;
  }
  return Client(fd);
}

Client::Client(Client&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

Client& Client::operator=(Client&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

Client::~Client() {
  if (fd_ >= 0) ::close(fd_);
}

Status Client::send(const Frame& frame) {
  size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = ::send(fd_, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("sending to tandemd");
    sent += size_t(n);
  }
  return Status::Ok();
}

namespace {

// Reads exactly `size` bytes; kTimeout / kIo as receive() documents.
Status read_exact(int fd, uint8_t* out, size_t size, int timeout_ms) {
  size_t got = 0;
  while (got < size) {
    if (timeout_ms >= 0) {
      pollfd p{fd, POLLIN, 0};
      const int r = ::poll(&p, 1, timeout_ms);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return io_error("poll");
      if (r == 0) return make_error(ErrorCode::kTimeout, "no reply from tandemd in time");
    }
    const ssize_t n = ::recv(fd, out + got, size - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("reading from tandemd");
    if (n == 0) return make_error(ErrorCode::kIo, "tandemd closed the connection");
    got += size_t(n);
  }
  return Status::Ok();
}

}  // namespace

Result<ReplyFrame> Client::receive(int timeout_ms) {
  ReplyFrame out;
  out.bytes.resize(kPrefixBytes);
  TANDEM_TRY(read_exact(fd_, out.bytes.data(), kPrefixBytes, timeout_ms));
  const uint32_t body = frame_body_size(out.bytes);
  if (body > max_frame_bytes_ || body < kMinFrameBodyBytes) {
    return make_error(ErrorCode::kProtocol,
                      "tandemd sent a frame of " + std::to_string(body) + " bytes");
  }
  out.bytes.resize(kPrefixBytes + body);
  TANDEM_TRY(read_exact(fd_, out.bytes.data() + kPrefixBytes, body, timeout_ms));
  TANDEM_ASSIGN_OR_RETURN(out.reply, verify_reply(out.bytes));
  return out;
}

Result<GenerateResult> generate(Client& client, uint64_t id, const PromptInput& prompt,
                                const SamplingParams& sampling, const GenerateOptions& options) {
  TANDEM_TRY(
      client.send(encode_generate(id, prompt, sampling, options.max_tokens_set, options.stream)));
  GenerateResult result;
  for (;;) {
    TANDEM_ASSIGN_OR_RETURN(ReplyFrame frame, client.receive());
    const wire::Reply& reply = *frame.reply;
    if (reply.id() != id) {
      if (reply.id() == 0 && reply.body_type() == wire::ReplyBody::ErrorInfo) {
        return decode_error(reply.body_as_ErrorInfo());
      }
      return make_error(ErrorCode::kProtocol, "reply for request " + std::to_string(reply.id()) +
                                                  " while waiting for " + std::to_string(id));
    }
    switch (reply.body_type()) {
      case wire::ReplyBody::Accepted:
        result.prompt_tokens = reply.body_as_Accepted()->prompt_tokens();
        result.trace_id = reply.body_as_Accepted()->trace_id();
        break;
      case wire::ReplyBody::TokenEvent: {
        const wire::TokenEvent& ev = *reply.body_as_TokenEvent();
        if (ev.ids()) result.ids.insert(result.ids.end(), ev.ids()->begin(), ev.ids()->end());
        if (options.on_ids && ev.ids() && ev.ids()->size() > 0) options.on_ids(ev.ids()->size());
        if (ev.text() && ev.text()->size() > 0) {
          result.text += ev.text()->str();
          if (options.on_text) options.on_text(ev.text()->str());
        }
        break;
      }
      case wire::ReplyBody::Finished:
        result.finished = decode_finished(id, *reply.body_as_Finished());
        if (!result.finished.text_tail.empty()) {
          result.text += result.finished.text_tail;
          if (options.on_text) options.on_text(result.finished.text_tail);
        }
        return result;
      case wire::ReplyBody::ErrorInfo:
        return decode_error(reply.body_as_ErrorInfo());
      default:
        return make_error(ErrorCode::kProtocol, "unexpected reply to a generate request");
    }
  }
}

namespace {

constexpr uint64_t kQueryId = 1;

Result<ReplyFrame> query(Client& client, const Frame& request, wire::ReplyBody want,
                         int timeout_ms) {
  TANDEM_TRY(client.send(request));
  TANDEM_ASSIGN_OR_RETURN(ReplyFrame frame, client.receive(timeout_ms));
  if (frame.reply->body_type() == wire::ReplyBody::ErrorInfo) {
    return decode_error(frame.reply->body_as_ErrorInfo());
  }
  if (frame.reply->body_type() != want) {
    return make_error(ErrorCode::kProtocol, "unexpected reply type from tandemd");
  }
  return frame;
}

}  // namespace

Result<DaemonStatus> query_status(Client& client) {
  TANDEM_ASSIGN_OR_RETURN(
      ReplyFrame f, query(client, encode_simple_request(kQueryId, wire::RequestBody::StatusRequest),
                          wire::ReplyBody::StatusReply, -1));
  return decode_status(*f.reply->body_as_StatusReply());
}

Result<std::string> query_metrics(Client& client) {
  TANDEM_ASSIGN_OR_RETURN(
      ReplyFrame f,
      query(client, encode_simple_request(kQueryId, wire::RequestBody::MetricsRequest),
            wire::ReplyBody::MetricsReply, -1));
  const auto* t = f.reply->body_as_MetricsReply()->text();
  return t ? t->str() : std::string();
}

Result<std::string> query_trace(Client& client, std::optional<uint64_t> trace_id, uint32_t last_n) {
  TANDEM_ASSIGN_OR_RETURN(ReplyFrame f,
                          query(client, encode_trace_request(kQueryId, trace_id, last_n),
                                wire::ReplyBody::TraceReply, -1));
  const auto* j = f.reply->body_as_TraceReply()->json();
  return j ? j->str() : std::string();
}

Result<Health> query_health(Client& client, int timeout_ms) {
  TANDEM_ASSIGN_OR_RETURN(
      ReplyFrame f, query(client, encode_simple_request(kQueryId, wire::RequestBody::HealthRequest),
                          wire::ReplyBody::HealthReply, timeout_ms));
  const auto* h = f.reply->body_as_HealthReply();
  return Health{h->ok(), h->state() ? h->state()->str() : std::string()};
}

}  // namespace tandem::daemon
