#include "trace/trace.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace tandem {

void RequestTrace::resolve_device_times() {
  for (Span& s : spans) {
    if (!s.device) continue;
    int64_t start = 0, end = 0;
    if (s.device->resolve(start, end)) {
      s.start_ns = start;
      s.dur_ns = end - start;
    }
    s.device.reset();
  }
}

const char* track_name(Track t) {
  switch (t) {
    case Track::kDaemon:
      return "daemon loop";
    case Track::kPrefill:
      return "prefill stage";
    case Track::kTransport:
      return "KV transport";
    case Track::kDecode:
      return "decode stage";
    case Track::kDraft:
      return "decode stage: draft";
    case Track::kVerify:
      return "decode stage: verify";
  }
  return "?";
}

void TraceRing::push(RequestTrace trace) {
  std::lock_guard lock(mu_);
  traces_.push_back(std::move(trace));
  while (traces_.size() > capacity_) traces_.pop_front();
}

std::vector<RequestTrace> TraceRing::snapshot(std::optional<uint64_t> request_id,
                                              size_t last_n) const {
  std::lock_guard lock(mu_);
  std::vector<RequestTrace> out;
  if (request_id) {
    for (const RequestTrace& t : traces_) {
      if (t.request_id == *request_id) out.push_back(t);
    }
    return out;
  }
  const size_t n = last_n == 0 ? traces_.size() : std::min(last_n, traces_.size());
  out.assign(traces_.end() - std::ptrdiff_t(n), traces_.end());
  return out;
}

bool TraceRing::append(uint64_t request_id, const std::vector<Span>& spans) {
  std::lock_guard lock(mu_);
  for (auto it = traces_.rbegin(); it != traces_.rend(); ++it) {
    if (it->request_id != request_id) continue;
    for (const Span& s : spans) {
      it->spans.push_back(s);
      it->arrival_ns = std::min(it->arrival_ns, s.start_ns);
      it->finish_ns = std::max(it->finish_ns, s.start_ns + s.dur_ns);
    }
    return true;
  }
  return false;
}

std::string chrome_trace_json(const std::vector<RequestTrace>& traces) {
  using nlohmann::ordered_json;
  ordered_json events = ordered_json::array();
  constexpr int kPid = 1;
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", kPid},
                    {"tid", 0},
                    {"args", {{"name", "tandemd"}}}});
  for (int t = 0; t <= int(Track::kVerify); ++t) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", kPid},
                      {"tid", t},
                      {"args", {{"name", track_name(Track(t))}}}});
    events.push_back({{"name", "thread_sort_index"},
                      {"ph", "M"},
                      {"pid", kPid},
                      {"tid", t},
                      {"args", {{"sort_index", t}}}});
  }
  auto us = [](int64_t ns) { return double(ns) / 1000.0; };
  for (const RequestTrace& r : traces) {
    const std::string rid = std::to_string(r.request_id);
    // The request covers every span of it, whatever clock skew between recorders.
    int64_t begin = r.arrival_ns, end = std::max(r.arrival_ns, r.finish_ns);
    for (const Span& s : r.spans) {
      begin = std::min(begin, s.start_ns);
      end = std::max(end, s.start_ns + std::max<int64_t>(0, s.dur_ns));
    }
    events.push_back({{"name", "request " + rid},
                      {"cat", "request"},
                      {"ph", "b"},
                      {"id", r.request_id},
                      {"pid", kPid},
                      {"tid", int(Track::kDaemon)},
                      {"ts", us(begin)},
                      {"args",
                       {{"request_id", r.request_id},
                        {"prompt_tokens", r.prompt_tokens},
                        {"completion_tokens", r.completion_tokens},
                        {"finish_reason", r.finish_reason}}}});
    events.push_back({{"name", "request " + rid},
                      {"cat", "request"},
                      {"ph", "e"},
                      {"id", r.request_id},
                      {"pid", kPid},
                      {"tid", int(Track::kDaemon)},
                      {"ts", us(end)}});
    std::vector<Span> spans = r.spans;
    std::stable_sort(spans.begin(), spans.end(),
                     [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
    for (size_t i = 0; i < spans.size(); ++i) {
      const Span& s = spans[i];
      ordered_json args = {{"request_id", r.request_id}};
      if (s.index >= 0) args["index"] = s.index;
      if (s.tokens) args["tokens"] = s.tokens;
      if (s.batch) args["batch"] = s.batch;
      if (s.layer_begin >= 0) {
        args["layers"] = std::to_string(s.layer_begin) + ".." + std::to_string(s.layer_end);
      }
      if (s.bytes) args["bytes"] = s.bytes;
      if (s.accepted >= 0) args["accepted"] = s.accepted;
      if (s.detail) args["backend"] = s.detail;
      events.push_back({{"name", s.name},
                        {"cat", "stage"},
                        {"ph", "X"},
                        {"pid", kPid},
                        {"tid", int(s.track)},
                        {"ts", us(s.start_ns)},
                        {"dur", us(std::max<int64_t>(0, s.dur_ns))},
                        {"args", args}});
      // Flow arrows: start at the first span, step through each, finish at the last; they bind
      // to the enclosing slices ("bp": "e"), linking the request across tracks.
      const char* ph = i == 0 ? "s" : (i + 1 == spans.size() ? "f" : "t");
      if (spans.size() < 2) break;
      ordered_json flow = {{"name", "request " + rid}, {"cat", "flow"}, {"ph", ph},
                           {"id", r.request_id},       {"pid", kPid},   {"tid", int(s.track)},
                           {"ts", us(s.start_ns)}};
      if (i + 1 == spans.size()) flow["bp"] = "e";
      events.push_back(flow);
    }
  }
  ordered_json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return doc.dump();
}

}  // namespace tandem
