#include "frame.h"

#include <cstring>
#include <string>

namespace tandem::daemon {

void FrameReader::append(const uint8_t* data, size_t size) {
  // Compact before growing so the buffer never holds more than one partial frame plus a chunk.
  if (consumed_ > 0) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + std::ptrdiff_t(consumed_));
    consumed_ = 0;
  }
  buffer_.insert(buffer_.end(), data, data + size);
}

uint32_t frame_body_size(std::span<const uint8_t> frame) {
  return uint32_t(frame[0]) | uint32_t(frame[1]) << 8 | uint32_t(frame[2]) << 16 |
         uint32_t(frame[3]) << 24;
}

Result<std::span<const uint8_t>> FrameReader::next() {
  const std::span<const uint8_t> rest(buffer_.data() + consumed_, buffer_.size() - consumed_);
  if (rest.size() < kPrefixBytes) return std::span<const uint8_t>();
  const uint32_t body = frame_body_size(rest);
  if (body > max_frame_bytes_) {
    return make_error(ErrorCode::kProtocol, "frame of " + std::to_string(body) +
                                                " bytes is over the limit of " +
                                                std::to_string(max_frame_bytes_));
  }
  if (body < kMinFrameBodyBytes) {
    return make_error(ErrorCode::kProtocol,
                      "frame of " + std::to_string(body) + " bytes is too small to be a message");
  }
  if (rest.size() < kPrefixBytes + body) {
    buffer_.reserve(consumed_ + kPrefixBytes + body);  // the limit was checked above
    return std::span<const uint8_t>();
  }
  consumed_ += kPrefixBytes + body;
  return rest.first(kPrefixBytes + body);
}

namespace {

template <typename T>
Result<const T*> verify(std::span<const uint8_t> frame, const char* what) {
  if (frame.size() < kPrefixBytes + kMinFrameBodyBytes ||
      frame_body_size(frame) != frame.size() - kPrefixBytes) {
    return make_error(ErrorCode::kProtocol, std::string(what) + " frame is truncated");
  }
  if (!flatbuffers::BufferHasIdentifier(frame.data(), kFileIdentifier, /*size_prefixed=*/true)) {
    return make_error(ErrorCode::kProtocol,
                      std::string(what) + " frame lacks the \"TNDM\" file identifier");
  }
  flatbuffers::Verifier::Options options;
  options.max_depth = kVerifierMaxDepth;
  options.max_tables = kVerifierMaxTables;
  flatbuffers::Verifier verifier(frame.data(), frame.size(), options);
  if (!verifier.VerifySizePrefixedBuffer<T>(kFileIdentifier)) {
    return make_error(ErrorCode::kProtocol,
                      std::string(what) + " frame failed FlatBuffers verification");
  }
  const T* root = flatbuffers::GetSizePrefixedRoot<T>(frame.data());
  // The Verifier accepts a union whose type is set and whose value is absent; every reader
  // below would dereference it.
  if (root->body() == nullptr) {
    return make_error(ErrorCode::kProtocol, std::string(what) + " frame has no body");
  }
  return root;
}

}  // namespace

Result<const wire::Request*> verify_request(std::span<const uint8_t> frame) {
  return verify<wire::Request>(frame, "request");
}

Result<const wire::Reply*> verify_reply(std::span<const uint8_t> frame) {
  return verify<wire::Reply>(frame, "reply");
}

}  // namespace tandem::daemon
