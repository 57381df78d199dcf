// libFuzzer target: any byte stream a client can send, through exactly what the daemon runs on
// it (FrameReader in arbitrary chunks, the Verifier, decode_generate), under ASan/UBSan.
// The first input byte picks the chunk size, so short reads and split prefixes are covered.
#include <cstddef>
#include <cstdint>

#include "daemon/frame.h"
#include "daemon/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::daemon;
  if (size == 0) return 0;
  const size_t chunk = size_t(data[0] % 64) + 1;
  ++data;
  --size;
  FrameReader reader(64 * 1024);  // a small limit, so the fuzzer reaches it
  for (size_t at = 0; at < size; at += chunk) {
    reader.append(data + at, std::min(chunk, size - at));
    for (;;) {
      auto frame = reader.next();
      if (!frame.ok()) return 0;  // the daemon closes the connection here
      if (frame->empty()) break;
      auto request = verify_request(*frame);
      if (!request.ok()) return 0;
      const tandem::wire::Request& r = **request;
      if (r.body_type() == tandem::wire::RequestBody::GenerateRequest) {
        auto call = decode_generate(*r.body_as_GenerateRequest());
        (void)call;
      }
    }
  }
  return 0;
}
