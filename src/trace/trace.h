// Stage-by-stage latency traces. Every request carries a RequestTrace; stages append spans as
// they work on it (host work timed with the monotonic clock; GPU work with events read back off
// the hot path by the runner). Finished traces go into an always-on ring of the last N requests,
// which `tandem trace` exports as Chrome Trace Event JSON (opens in Perfetto).
//
// Span names follow the OpenTelemetry gen_ai conventions where one exists (a request maps to a
// gen_ai "chat"/"text_completion" span; stage spans are its children), so an OTLP exporter can
// map them one to one later.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

// One track per stage in the exported trace.
enum class Track : uint8_t { kDaemon, kPrefill, kTransport, kDecode, kDraft, kVerify };
const char* track_name(Track t);

inline int64_t trace_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Span {
  const char* name = "";  // static string: "queue", "prefill_chunk", "kv_ship", "decode_step", ...
  Track track = Track::kDaemon;
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  int32_t index = -1;        // chunk number, step number
  int32_t tokens = 0;        // tokens this span computed for the request
  int32_t batch = 0;         // sequences in the step
  int32_t layer_begin = -1;  // kv_ship: layers [layer_begin, layer_end)
  int32_t layer_end = -1;
  int64_t bytes = 0;  // kv_ship
};

struct RequestTrace {
  uint64_t request_id = 0;
  int64_t arrival_ns = 0;
  int64_t finish_ns = 0;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  std::string finish_reason;
  std::vector<Span> spans;

  void add(Span s) { spans.push_back(s); }
};

// Thread-safe ring of the last `capacity` finished traces.
class TraceRing {
 public:
  explicit TraceRing(size_t capacity) : capacity_(capacity) {}
  void push(RequestTrace trace);
  // The last n traces (all when n == 0), or the one request when `request_id` is set.
  std::vector<RequestTrace> snapshot(std::optional<uint64_t> request_id, size_t last_n) const;

 private:
  size_t capacity_;
  mutable std::mutex mu_;
  std::deque<RequestTrace> traces_;
};

// Chrome Trace Event JSON: one process, one thread (track) per stage, "X" complete events for
// spans, an enclosing "request" event on the daemon track, and flow events ("s"/"t"/"f") that
// link one request's spans across tracks in time order.
std::string chrome_trace_json(const std::vector<RequestTrace>& traces);

}  // namespace tandem
