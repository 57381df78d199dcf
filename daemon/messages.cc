#include "messages.h"

#include <utility>

#include "core/check.h"

namespace tandem::daemon {

namespace fb = flatbuffers;

namespace {

template <typename T>
fb::Optional<T> to_fb(const std::optional<T>& v) {
  return v ? fb::Optional<T>(*v) : fb::nullopt;
}
template <typename T>
std::optional<T> from_fb(const fb::Optional<T>& v) {
  return v ? std::optional<T>(*v) : std::nullopt;
}

std::string str(const fb::String* s) {
  return s ? s->str() : std::string();
}

Frame finish_request(fb::FlatBufferBuilder& fbb, uint64_t id, wire::RequestBody type,
                     fb::Offset<void> body) {
  fbb.FinishSizePrefixed(wire::CreateRequest(fbb, id, type, body), kFileIdentifier);
  return fbb.Release();
}

Frame finish_reply(fb::FlatBufferBuilder& fbb, uint64_t id, wire::ReplyBody type,
                   fb::Offset<void> body) {
  fbb.FinishSizePrefixed(wire::CreateReply(fbb, id, type, body), kFileIdentifier);
  return fbb.Release();
}

}  // namespace

wire::ErrorCode to_wire(ErrorCode code) {
  // The wire enum mirrors ErrorCode value for value (append-only on both sides).
  return wire::ErrorCode(uint8_t(code));
}

ErrorCode from_wire(wire::ErrorCode code) {
  if (code > wire::ErrorCode::MAX) return ErrorCode::kInternal;  // a newer daemon's code
  return ErrorCode(uint8_t(code));
}

wire::FinishReason to_wire(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return wire::FinishReason::Stop;
    case FinishReason::kLength:
      return wire::FinishReason::Length;
    case FinishReason::kAbort:
      return wire::FinishReason::Abort;
    case FinishReason::kError:
      return wire::FinishReason::Error;
  }
  return wire::FinishReason::Error;
}

FinishReason from_wire(wire::FinishReason reason) {
  switch (reason) {
    case wire::FinishReason::Stop:
      return FinishReason::kStop;
    case wire::FinishReason::Length:
      return FinishReason::kLength;
    case wire::FinishReason::Abort:
      return FinishReason::kAbort;
    case wire::FinishReason::Error:
      return FinishReason::kError;
  }
  return FinishReason::kError;
}

// ---- requests ----

Frame encode_generate(uint64_t id, const PromptInput& prompt, const SamplingParams& s,
                      bool max_tokens_set, bool stream) {
  fb::FlatBufferBuilder fbb(1024);
  wire::Prompt prompt_type = wire::Prompt::NONE;
  fb::Offset<void> prompt_offset;
  switch (prompt.kind) {
    case PromptInput::Kind::kText:
      prompt_type = wire::Prompt::TextPrompt;
      prompt_offset = wire::CreateTextPromptDirect(fbb, prompt.text.c_str()).Union();
      break;
    case PromptInput::Kind::kTokenIds:
      prompt_type = wire::Prompt::TokenIdsPrompt;
      prompt_offset = wire::CreateTokenIdsPromptDirect(fbb, &prompt.token_ids).Union();
      break;
    case PromptInput::Kind::kMessages: {
      std::vector<fb::Offset<wire::ChatMessage>> messages;
      if (prompt.messages.is_array()) {
        for (const auto& m : prompt.messages) {
          const std::string role = m.is_object() ? m.value("role", "") : "";
          // Non-string content (tool calls, parts) travels as its JSON text.
          std::string content;
          if (m.is_object() && m.contains("content")) {
            content =
                m["content"].is_string() ? m["content"].get<std::string>() : m["content"].dump();
          }
          messages.push_back(wire::CreateChatMessageDirect(fbb, role.c_str(), content.c_str()));
        }
      }
      const std::string kwargs = prompt.template_kwargs.dump();
      prompt_type = wire::Prompt::ChatPrompt;
      prompt_offset =
          wire::CreateChatPromptDirect(fbb, &messages, prompt.add_generation_prompt, kwargs.c_str())
              .Union();
      break;
    }
  }
  std::vector<fb::Offset<fb::String>> stop;
  for (const auto& x : s.stop) stop.push_back(fbb.CreateString(x));
  auto sampling = wire::CreateSamplingDirect(
      fbb, to_fb(s.temperature), to_fb(s.top_p), to_fb(s.top_k), to_fb(s.min_p),
      to_fb(s.repetition_penalty), s.presence_penalty, s.frequency_penalty, to_fb(s.seed), &stop,
      &s.stop_token_ids, s.ignore_eos,
      max_tokens_set ? fb::Optional<int32_t>(s.max_tokens) : fb::nullopt, s.min_tokens,
      s.skip_special_tokens);
  auto body = wire::CreateGenerateRequest(fbb, prompt_type, prompt_offset, sampling, stream);
  return finish_request(fbb, id, wire::RequestBody::GenerateRequest, body.Union());
}

Frame encode_cancel(uint64_t id, uint64_t target_id) {
  fb::FlatBufferBuilder fbb(64);
  auto body = wire::CreateCancelRequest(fbb, target_id);
  return finish_request(fbb, id, wire::RequestBody::CancelRequest, body.Union());
}

Frame encode_simple_request(uint64_t id, wire::RequestBody kind) {
  fb::FlatBufferBuilder fbb(64);
  fb::Offset<void> body;
  switch (kind) {
    case wire::RequestBody::StatusRequest:
      body = wire::CreateStatusRequest(fbb).Union();
      break;
    case wire::RequestBody::MetricsRequest:
      body = wire::CreateMetricsRequest(fbb).Union();
      break;
    case wire::RequestBody::TraceRequest:
      body = wire::CreateTraceRequest(fbb).Union();
      break;
    case wire::RequestBody::HealthRequest:
      body = wire::CreateHealthRequest(fbb).Union();
      break;
    default:
      TANDEM_CHECK(false, "encode_simple_request: %d has fields", int(kind));
  }
  return finish_request(fbb, id, kind, body);
}

Frame encode_trace_request(uint64_t id, std::optional<uint64_t> trace_id, uint32_t last_n) {
  fb::FlatBufferBuilder fbb(64);
  auto body = wire::CreateTraceRequest(fbb, to_fb(trace_id), last_n);
  return finish_request(fbb, id, wire::RequestBody::TraceRequest, body.Union());
}

Result<GenerateCall> decode_generate(const wire::GenerateRequest& r) {
  GenerateCall call;
  call.stream = r.stream();
  if (r.prompt() == nullptr) {
    return make_error(ErrorCode::kProtocol,
                      "generate: no prompt (or a prompt kind this "
                      "daemon does not know)");
  }
  switch (r.prompt_type()) {
    case wire::Prompt::TextPrompt: {
      const auto* p = r.prompt_as_TextPrompt();
      call.prompt.kind = PromptInput::Kind::kText;
      call.prompt.text = str(p->text());
      if (call.prompt.text.empty()) {
        return make_error(ErrorCode::kInvalidArgument, "generate: prompt.text is empty");
      }
      break;
    }
    case wire::Prompt::TokenIdsPrompt: {
      const auto* p = r.prompt_as_TokenIdsPrompt();
      call.prompt.kind = PromptInput::Kind::kTokenIds;
      if (!p->ids() || p->ids()->size() == 0) {
        return make_error(ErrorCode::kInvalidArgument, "generate: prompt.ids is empty");
      }
      for (int32_t id : *p->ids()) {
        if (id < 0) {
          return make_error(ErrorCode::kInvalidArgument,
                            "generate: prompt.ids holds the negative id " + std::to_string(id));
        }
        call.prompt.token_ids.push_back(id);
      }
      break;
    }
    case wire::Prompt::ChatPrompt: {
      const auto* p = r.prompt_as_ChatPrompt();
      call.prompt.kind = PromptInput::Kind::kMessages;
      call.prompt.add_generation_prompt = p->add_generation_prompt();
      call.prompt.messages = nlohmann::ordered_json::array();
      if (!p->messages() || p->messages()->size() == 0) {
        return make_error(ErrorCode::kInvalidArgument, "generate: prompt.messages is empty");
      }
      for (const auto* m : *p->messages()) {
        if (!m->role() || m->role()->size() == 0) {
          return make_error(ErrorCode::kInvalidArgument, "generate: a chat message has no role");
        }
        call.prompt.messages.push_back(
            {{"role", m->role()->str()}, {"content", str(m->content())}});
      }
      if (p->template_kwargs_json() && p->template_kwargs_json()->size() > 0) {
        auto kwargs = nlohmann::ordered_json::parse(p->template_kwargs_json()->str(), nullptr,
                                                    /*allow_exceptions=*/false);
        if (kwargs.is_discarded() || !kwargs.is_object()) {
          return make_error(ErrorCode::kInvalidArgument,
                            "generate: prompt.template_kwargs_json is not a JSON object");
        }
        call.prompt.template_kwargs = std::move(kwargs);
      }
      break;
    }
    default:
      return make_error(ErrorCode::kProtocol,
                        "generate: no prompt (or a prompt kind this "
                        "daemon does not know)");
  }
  if (const wire::Sampling* s = r.sampling()) {
    SamplingParams& p = call.sampling;
    p.temperature = from_fb(s->temperature());
    p.top_p = from_fb(s->top_p());
    p.top_k = from_fb(s->top_k());
    p.min_p = from_fb(s->min_p());
    p.repetition_penalty = from_fb(s->repetition_penalty());
    p.presence_penalty = s->presence_penalty();
    p.frequency_penalty = s->frequency_penalty();
    p.seed = from_fb(s->seed());
    if (s->stop()) {
      for (const auto* x : *s->stop()) p.stop.push_back(x->str());
    }
    if (s->stop_token_ids()) {
      p.stop_token_ids.assign(s->stop_token_ids()->begin(), s->stop_token_ids()->end());
    }
    p.ignore_eos = s->ignore_eos();
    if (s->max_tokens()) {
      p.max_tokens = *s->max_tokens();
      call.max_tokens_set = true;
    }
    p.min_tokens = s->min_tokens();
    p.skip_special_tokens = s->skip_special_tokens();
  }
  return call;
}

// ---- replies ----

Frame encode_error(uint64_t id, const Error& error) {
  fb::FlatBufferBuilder fbb(256);
  auto body = wire::CreateErrorInfoDirect(fbb, to_wire(error.code), error.message.c_str());
  return finish_reply(fbb, id, wire::ReplyBody::ErrorInfo, body.Union());
}

Frame encode_accepted(uint64_t id, int32_t prompt_tokens, uint64_t trace_id) {
  fb::FlatBufferBuilder fbb(64);
  auto body = wire::CreateAccepted(fbb, prompt_tokens, trace_id);
  return finish_reply(fbb, id, wire::ReplyBody::Accepted, body.Union());
}

Frame encode_tokens(uint64_t id, const std::vector<int32_t>& ids, const std::string& text) {
  fb::FlatBufferBuilder fbb(64 + ids.size() * 4 + text.size());
  auto body = wire::CreateTokenEventDirect(fbb, &ids, text.c_str());
  return finish_reply(fbb, id, wire::ReplyBody::TokenEvent, body.Union());
}

Frame encode_finished(uint64_t id, const FinishEvent& e) {
  fb::FlatBufferBuilder fbb(512);
  auto usage = wire::CreateUsage(fbb, e.usage.prompt_tokens, e.usage.completion_tokens);
  const RequestTimings& t = e.timings;
  auto timings =
      wire::CreateTimings(fbb, t.queue_ms, t.prefill_ms, t.kv_ship_ms, t.ttft_ms, t.decode_ms,
                          t.tpot_ms, t.e2e_ms, t.prefill_chunks, t.decode_steps);
  fb::Offset<wire::SpecStats> spec;
  if (e.spec) {
    spec = wire::CreateSpecStatsDirect(fbb, e.spec->proposed, e.spec->accepted,
                                       &e.spec->accepted_per_position, e.spec->drafts);
  }
  fb::Offset<wire::ErrorInfo> error;
  if (e.error) {
    error = wire::CreateErrorInfoDirect(fbb, to_wire(e.error->code), e.error->message.c_str());
  }
  auto body = wire::CreateFinishedDirect(fbb, to_wire(e.reason), usage, timings, spec, error,
                                         e.text_tail.c_str());
  return finish_reply(fbb, id, wire::ReplyBody::Finished, body.Union());
}

Frame encode_status(uint64_t id, const DaemonStatus& s) {
  fb::FlatBufferBuilder fbb(512);
  std::vector<fb::Offset<wire::PoolStatus>> pools;
  for (const PoolStatus& p : s.engine.pools) {
    pools.push_back(wire::CreatePoolStatusDirect(fbb, p.name.c_str(), p.device.c_str(), p.page_size,
                                                 p.total_pages, p.used_pages, p.page_bytes,
                                                 p.cached_pages));
  }
  std::vector<fb::Offset<wire::DeviceMemory>> memory;
  for (const DeviceMemory& d : s.engine.memory) {
    std::vector<fb::Offset<wire::MemoryPart>> parts;
    for (const MemoryPart& p : d.parts) {
      parts.push_back(wire::CreateMemoryPartDirect(fbb, p.name.c_str(), p.bytes, p.detail.c_str()));
    }
    std::vector<fb::Offset<wire::SettingEffect>> settings;
    for (const SettingEffect& e : d.settings) {
      settings.push_back(wire::CreateSettingEffectDirect(fbb, e.setting.c_str(), e.value.c_str(),
                                                         e.bytes, e.effect.c_str()));
    }
    memory.push_back(wire::CreateDeviceMemoryDirect(fbb, d.device.c_str(), d.total_bytes,
                                                    d.free_bytes, d.host_available_bytes, &parts,
                                                    &settings, d.resident_bytes));
  }
  auto body = wire::CreateStatusReplyDirect(
      fbb, s.state.c_str(), s.model.c_str(), s.engine.running, s.engine.waiting, s.engine.finished,
      &pools, s.connections, s.requests_in_flight, s.uptime_s, &memory);
  return finish_reply(fbb, id, wire::ReplyBody::StatusReply, body.Union());
}

Frame encode_metrics(uint64_t id, const std::string& text) {
  fb::FlatBufferBuilder fbb(256 + text.size());
  auto body = wire::CreateMetricsReplyDirect(fbb, text.c_str());
  return finish_reply(fbb, id, wire::ReplyBody::MetricsReply, body.Union());
}

Frame encode_trace(uint64_t id, const std::string& json) {
  fb::FlatBufferBuilder fbb(256 + json.size());
  auto body = wire::CreateTraceReplyDirect(fbb, json.c_str());
  return finish_reply(fbb, id, wire::ReplyBody::TraceReply, body.Union());
}

Frame encode_health(uint64_t id, bool ok, const std::string& state) {
  fb::FlatBufferBuilder fbb(64);
  auto body = wire::CreateHealthReplyDirect(fbb, ok, state.c_str());
  return finish_reply(fbb, id, wire::ReplyBody::HealthReply, body.Union());
}

Error decode_error(const wire::ErrorInfo* error) {
  if (!error) return make_error(ErrorCode::kProtocol, "error reply without details");
  return make_error(from_wire(error->code()), str(error->message()));
}

FinishEvent decode_finished(uint64_t id, const wire::Finished& f) {
  FinishEvent e;
  e.request_id = id;
  e.reason = from_wire(f.reason());
  if (f.error()) e.error = decode_error(f.error());
  if (const auto* u = f.usage()) {
    e.usage.prompt_tokens = u->prompt_tokens();
    e.usage.completion_tokens = u->completion_tokens();
  }
  if (const auto* t = f.timings()) {
    e.timings = RequestTimings{t->queue_ms(), t->prefill_ms(),     t->kv_ship_ms(),
                               t->ttft_ms(),  t->decode_ms(),      t->tpot_ms(),
                               t->e2e_ms(),   t->prefill_chunks(), t->decode_steps()};
  }
  if (const auto* s = f.spec()) {
    SpecStats spec;
    spec.drafts = s->drafts();
    spec.proposed = s->proposed();
    spec.accepted = s->accepted();
    if (s->accepted_per_position()) {
      spec.accepted_per_position.assign(s->accepted_per_position()->begin(),
                                        s->accepted_per_position()->end());
    }
    e.spec = std::move(spec);
  }
  e.text_tail = str(f.text_tail());
  return e;
}

DaemonStatus decode_status(const wire::StatusReply& r) {
  DaemonStatus s;
  s.state = str(r.state());
  s.model = str(r.model());
  s.engine.running = r.running();
  s.engine.waiting = r.waiting();
  s.engine.finished = r.finished();
  if (r.pools()) {
    for (const auto* p : *r.pools()) {
      s.engine.pools.push_back(PoolStatus{str(p->name()), str(p->device()), p->page_size(),
                                          p->total_pages(), p->used_pages(), p->page_bytes(),
                                          p->cached_pages()});
    }
  }
  s.connections = r.connections();
  s.requests_in_flight = r.requests_in_flight();
  s.uptime_s = r.uptime_s();
  if (r.memory()) {
    for (const auto* m : *r.memory()) {
      DeviceMemory d;
      d.device = str(m->device());
      d.total_bytes = m->total_bytes();
      d.free_bytes = m->free_bytes();
      d.host_available_bytes = m->host_available_bytes();
      d.resident_bytes = m->resident_bytes();
      if (m->parts()) {
        for (const auto* p : *m->parts()) {
          d.parts.push_back(MemoryPart{str(p->name()), p->bytes(), str(p->detail())});
        }
      }
      if (m->settings()) {
        for (const auto* e : *m->settings()) {
          d.settings.push_back(
              SettingEffect{str(e->setting()), str(e->value()), e->bytes(), str(e->effect())});
        }
      }
      s.engine.memory.push_back(std::move(d));
    }
  }
  return s;
}

nlohmann::ordered_json status_json(const DaemonStatus& s) {
  nlohmann::ordered_json j;
  j["state"] = s.state;
  j["model"] = s.model;
  j["running"] = s.engine.running;
  j["waiting"] = s.engine.waiting;
  j["finished"] = s.engine.finished;
  j["connections"] = s.connections;
  j["requests_in_flight"] = s.requests_in_flight;
  j["uptime_s"] = s.uptime_s;
  j["pools"] = nlohmann::ordered_json::array();
  for (const PoolStatus& p : s.engine.pools) {
    j["pools"].push_back({{"name", p.name},
                          {"device", p.device},
                          {"page_size", p.page_size},
                          {"total_pages", p.total_pages},
                          {"used_pages", p.used_pages},
                          {"cached_pages", p.cached_pages},
                          {"free_pages", p.total_pages - p.used_pages},
                          {"page_bytes", p.page_bytes}});
  }
  j["memory"] = nlohmann::ordered_json::array();
  for (const DeviceMemory& d : s.engine.memory) {
    nlohmann::ordered_json dev = {
        {"device", d.device}, {"total_bytes", d.total_bytes}, {"free_bytes", d.free_bytes}};
    if (d.host_available_bytes) dev["host_available_bytes"] = d.host_available_bytes;
    if (d.resident_bytes) dev["resident_bytes"] = d.resident_bytes;
    dev["parts"] = nlohmann::ordered_json::array();
    for (const MemoryPart& p : d.parts) {
      dev["parts"].push_back({{"name", p.name}, {"bytes", p.bytes}, {"detail", p.detail}});
    }
    dev["settings"] = nlohmann::ordered_json::array();
    for (const SettingEffect& e : d.settings) {
      dev["settings"].push_back(
          {{"setting", e.setting}, {"value", e.value}, {"bytes", e.bytes}, {"effect", e.effect}});
    }
    j["memory"].push_back(std::move(dev));
  }
  return j;
}

}  // namespace tandem::daemon
