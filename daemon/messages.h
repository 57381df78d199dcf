// Encoding and decoding of protocol messages: engine and frontend types <-> FlatBuffers frames.
// Decoders only see verified frames; they still check what the schema cannot (a prompt is set,
// ids are non-negative, JSON fields parse) and name the field in their errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/events.h"
#include "engine/frontend.h"
#include "frame.h"
#include "sampling/sampling_params.h"

namespace tandem::daemon {

// What a Generate request asks for, before tokenization.
struct GenerateCall {
  PromptInput prompt;
  SamplingParams sampling;
  bool max_tokens_set = false;  // else the model's max_new_tokens (or 16) applies
  bool stream = true;
};

// The daemon's view for `status`: the engine's plus the server's own state.
struct DaemonStatus {
  std::string state;  // "serving" | "draining"
  std::string model;
  EngineStatus engine;
  int32_t connections = 0;
  int32_t requests_in_flight = 0;
  double uptime_s = 0;
};

wire::ErrorCode to_wire(ErrorCode code);
ErrorCode from_wire(wire::ErrorCode code);
wire::FinishReason to_wire(FinishReason reason);
FinishReason from_wire(wire::FinishReason reason);

// ---- requests (client side encodes, daemon decodes) ----
Frame encode_generate(uint64_t id, const PromptInput& prompt, const SamplingParams& sampling,
                      bool max_tokens_set, bool stream);
Frame encode_cancel(uint64_t id, uint64_t target_id);
Frame encode_simple_request(uint64_t id, wire::RequestBody kind);  // Status/Metrics/Health
Frame encode_trace_request(uint64_t id, std::optional<uint64_t> trace_id, uint32_t last_n);
Result<GenerateCall> decode_generate(const wire::GenerateRequest& request);

// ---- replies (daemon encodes, client decodes) ----
Frame encode_error(uint64_t id, const Error& error);
Frame encode_accepted(uint64_t id, int32_t prompt_tokens, uint64_t trace_id);
Frame encode_tokens(uint64_t id, const std::vector<int32_t>& ids, const std::string& text);
Frame encode_finished(uint64_t id, const FinishEvent& event);
Frame encode_status(uint64_t id, const DaemonStatus& status);
Frame encode_metrics(uint64_t id, const std::string& text);
Frame encode_trace(uint64_t id, const std::string& json);
Frame encode_health(uint64_t id, bool ok, const std::string& state);

Error decode_error(const wire::ErrorInfo* error);
FinishEvent decode_finished(uint64_t id, const wire::Finished& finished);
DaemonStatus decode_status(const wire::StatusReply& status);

// The JSON `tandem status --json` prints.
nlohmann::ordered_json status_json(const DaemonStatus& status);

}  // namespace tandem::daemon
