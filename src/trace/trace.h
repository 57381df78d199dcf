// Stage-by-stage latency traces. Every request carries a RequestTrace; stages append spans as
// they work on it (host work timed with the monotonic clock; GPU work with events read back off
// the hot path by the runner). Finished traces go into an always-on ring of the last N requests,
// which `tandem trace` exports as Chrome Trace Event JSON (opens in Perfetto).
//
// The span model maps onto OpenTelemetry (docs/tracing.md has the table): a RequestTrace is one
// gen_ai "text_completion" span (gen_ai.request.id = request_id, gen_ai.usage.input_tokens /
// output_tokens, gen_ai.response.finish_reasons); each Span is a child span named
// "tandem.<name>" whose fields become attributes (tandem.chunk, tandem.layers, tandem.kv.bytes,
// tandem.transport, gen_ai.speculative.k / accepted). An OTLP exporter maps them one to one.
//
// Span names (static strings): queue, tokenize, prefill_chunk, kv_ship, decode_ready,
// decode_step, spec_draft, spec_verify, detokenize, stream_write.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
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

// GPU work's own interval on the device (the CUDA runner records events around a forward). It
// is known only once the device has run the work, so a span keeps the handle and the trace
// resolves it when the request finishes, off the hot path.
class DeviceInterval {
 public:
  virtual ~DeviceInterval() = default;
  // [start_ns, end_ns) in trace_now_ns() time; false while the work has not run yet.
  virtual bool resolve(int64_t& start_ns, int64_t& end_ns) const = 0;
};

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
  int64_t bytes = 0;             // kv_ship, stream_write
  int32_t accepted = -1;         // spec_verify: draft tokens accepted (tokens = k proposed)
  const char* detail = nullptr;  // static string: kv_ship's transport backend
  // GPU work: the device's own interval replaces start/dur when the trace is finished.
  std::shared_ptr<const DeviceInterval> device;
};

struct RequestTrace {
  uint64_t request_id = 0;
  int64_t arrival_ns = 0;
  int64_t finish_ns = 0;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  std::string finish_reason;
  std::vector<Span> spans;
  // `--trace off`: spans are dropped at once and the trace never reaches the ring (the
  // overhead benchmark compares both settings).
  bool enabled = true;

  void add(const Span& s) {
    if (enabled) spans.push_back(s);
  }
  // Spans whose device interval has completed take its times; every handle is dropped.
  void resolve_device_times();
};

// Thread-safe ring of the last `capacity` finished traces.
class TraceRing {
 public:
  explicit TraceRing(size_t capacity) : capacity_(capacity) {}
  void push(RequestTrace trace);
  // The last n traces (all when n == 0), or the one request when `request_id` is set.
  std::vector<RequestTrace> snapshot(std::optional<uint64_t> request_id, size_t last_n) const;
  // Adds spans recorded outside the engine (the daemon's tokenize and stream writes) to a
  // finished trace still in the ring; the request's bounds grow to cover them. False when the
  // request is no longer (or never was) in the ring.
  bool append(uint64_t request_id, const std::vector<Span>& spans);

 private:
  size_t capacity_;
  mutable std::mutex mu_;
  std::deque<RequestTrace> traces_;
};

// Chrome Trace Event JSON: one process, one thread (track) per stage, "X" complete events for
// spans, an async "request" slice ("b"/"e", one row per request, so overlapping requests do not
// mis-nest on a thread track) and flow events ("s"/"t"/"f") that link one request's spans
// across tracks in time order.
std::string chrome_trace_json(const std::vector<RequestTrace>& traces);

}  // namespace tandem
