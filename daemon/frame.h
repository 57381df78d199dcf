// Framing of the tandemd protocol: a little-endian uint32 byte count, then a FlatBuffer with the
// "TNDM" identifier. The reader checks the count against the limit before it buffers a byte of
// the body, and every frame is run through the FlatBuffers Verifier before anything reads it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "core/error.h"
#include "protocol_generated.h"

namespace tandem::daemon {

inline constexpr char kFileIdentifier[] = "TNDM";
inline constexpr size_t kPrefixBytes = sizeof(uint32_t);
inline constexpr uint32_t kDefaultMaxFrameBytes = 4u << 20;
// A root offset and the identifier: no valid frame body is smaller.
inline constexpr uint32_t kMinFrameBodyBytes = 8;

// A frame ready to write: the size prefix and the body in one buffer.
using Frame = flatbuffers::DetachedBuffer;

// Splits a byte stream into frames. Not thread-safe; one per connection.
class FrameReader {
 public:
  explicit FrameReader(uint32_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}

  void append(const uint8_t* data, size_t size);
  // The next complete frame (prefix included), valid until the next append/next call; an empty
  // span when more bytes are needed; a kProtocol Error when the size prefix is out of bounds
  // (the stream cannot be resynchronised after that).
  Result<std::span<const uint8_t>> next();
  // Bytes of an incomplete frame still buffered (a truncated frame at end of stream).
  size_t buffered() const { return buffer_.size() - consumed_; }

 private:
  uint32_t max_frame_bytes_;
  std::vector<uint8_t> buffer_;  // [buffered bytes] unparsed stream data, from consumed_
  size_t consumed_ = 0;
};

// Body size announced by a frame's prefix.
uint32_t frame_body_size(std::span<const uint8_t> frame);

// Verifier limits: deep nesting and table counts that no honest request needs.
inline constexpr uint32_t kVerifierMaxDepth = 16;
inline constexpr uint32_t kVerifierMaxTables = 1u << 16;

// `frame` includes the size prefix. The returned pointer points into `frame`.
Result<const wire::Request*> verify_request(std::span<const uint8_t> frame);
Result<const wire::Reply*> verify_reply(std::span<const uint8_t> frame);

}  // namespace tandem::daemon
