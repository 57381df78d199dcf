// Writing safetensors as a stream: the header (every tensor's dtype, shape and offsets) is
// known up front, then tensor bytes follow in declaration order in pieces of any size.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "model/safetensors.h"

namespace tandem {

struct SafetensorsWriter::Impl {
  std::string path;
  int fd = -1;
  uint64_t data_bytes = 0;  // sum of all declared tensors' bytes
  uint64_t written = 0;     // data bytes appended so far
  bool finished = false;

  Status write_all(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd, c, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return make_error(ErrorCode::kIo, path + ": write failed: " + std::strerror(errno));
      }
      c += w;
      n -= size_t(w);
    }
    return Status::Ok();
  }

  ~Impl() {
    if (fd >= 0) ::close(fd);
    // A file that was never finished is incomplete; leave nothing that looks loadable.
    if (!finished && !path.empty()) ::unlink(path.c_str());
  }
};

Result<SafetensorsWriter> SafetensorsWriter::create(
    const std::string& path, std::vector<Entry> entries,
    const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps declaration order, so offsets in the header read in file order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const Entry& e : entries) {
    if (e.name.empty() || e.name == "__metadata__" || header.contains(e.name)) {
      return make_error(ErrorCode::kInvalidArgument,
                        path + ": tensor name '" + e.name + "' is empty, reserved or repeated");
    }
    uint64_t bytes = dtype_size(e.dtype);
    for (int64_t d : e.shape) {
      if (d < 0)
        return make_error(ErrorCode::kInvalidArgument,
                          path + ": tensor '" + e.name + "' has a negative dimension");
      bytes *= uint64_t(d);
    }
    header[e.name] = {{"dtype", std::string(dtype_name(e.dtype))},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Like the reference writer: pad with spaces so the data section starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');

  SafetensorsWriter w;
  w.impl_ = std::make_unique<Impl>();
  w.impl_->fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.impl_->fd < 0) {
    return make_error(ErrorCode::kIo, path + ": cannot create: " + std::strerror(errno));
  }
  w.impl_->path = path;
  w.impl_->data_bytes = offset;
  unsigned char len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  TANDEM_TRY(w.impl_->write_all(len, 8));
  TANDEM_TRY(w.impl_->write_all(text.data(), text.size()));
  return w;
}

SafetensorsWriter::SafetensorsWriter(SafetensorsWriter&&) noexcept = default;
SafetensorsWriter::~SafetensorsWriter() = default;

Status SafetensorsWriter::write(std::span<const std::byte> bytes) {
  TANDEM_CHECK(impl_ && !impl_->finished, "write after finish");
  if (impl_->written + bytes.size() > impl_->data_bytes) {
    return make_error(ErrorCode::kInvalidArgument,
                      impl_->path + ": more tensor bytes than the header declares (" +
                          std::to_string(impl_->data_bytes) + ")");
  }
  TANDEM_TRY(impl_->write_all(bytes.data(), bytes.size()));
  impl_->written += bytes.size();
  return Status::Ok();
}

Status SafetensorsWriter::finish() {
  TANDEM_CHECK(impl_ && !impl_->finished, "finish called twice");
  if (impl_->written != impl_->data_bytes) {
    return make_error(ErrorCode::kInvalidArgument,
                      impl_->path + ": finished after " + std::to_string(impl_->written) + " of " +
                          std::to_string(impl_->data_bytes) + " declared tensor bytes");
  }
  int fd = impl_->fd;
  impl_->fd = -1;
  if (::close(fd) != 0) {
    return make_error(ErrorCode::kIo, impl_->path + ": close failed: " + std::strerror(errno));
  }
  impl_->finished = true;
  return Status::Ok();
}

}  // namespace tandem
