// Framing and message codecs: what the daemon does with any byte stream a client might send.
#include <doctest/doctest.h>

#include <cstring>

#include "daemon/frame.h"
#include "daemon/messages.h"

namespace tandem::daemon {
namespace {

std::vector<uint8_t> bytes_of(const Frame& f) {
  return {f.data(), f.data() + f.size()};
}

std::vector<uint8_t> prefix(uint32_t n) {
  return {uint8_t(n), uint8_t(n >> 8), uint8_t(n >> 16), uint8_t(n >> 24)};
}

PromptInput text_prompt(const std::string& text) {
  PromptInput p;
  p.kind = PromptInput::Kind::kText;
  p.text = text;
  return p;
}

TEST_CASE("FrameReader splits a stream fed one byte at a time") {
  const auto a = bytes_of(encode_simple_request(1, wire::RequestBody::StatusRequest));
  const auto b = bytes_of(encode_cancel(2, 7));
  std::vector<uint8_t> stream = a;
  stream.insert(stream.end(), b.begin(), b.end());
  FrameReader reader(kDefaultMaxFrameBytes);
  std::vector<std::vector<uint8_t>> frames;
  for (uint8_t byte : stream) {
    reader.append(&byte, 1);
    auto f = reader.next();
    REQUIRE(f.ok());
    if (!f->empty()) frames.emplace_back(f->begin(), f->end());
  }
  REQUIRE(frames.size() == 2);
  CHECK(frames[0] == a);
  CHECK(frames[1] == b);
  CHECK(reader.buffered() == 0);
  auto req = verify_request(frames[1]);
  REQUIRE(req.ok());
  CHECK((*req)->id() == 2);
  CHECK((*req)->body_as_CancelRequest()->target_id() == 7);
}

TEST_CASE("FrameReader refuses a size prefix over the limit before buffering the body") {
  FrameReader reader(1024);
  const auto p = prefix(1025);
  reader.append(p.data(), p.size());
  auto f = reader.next();
  REQUIRE_FALSE(f.ok());
  CHECK(f.error().code == ErrorCode::kProtocol);
  CHECK(f.error().message.find("over the limit") != std::string::npos);

  FrameReader huge(kDefaultMaxFrameBytes);
  const auto q = prefix(0xFFFFFFFFu);
  huge.append(q.data(), q.size());
  CHECK_FALSE(huge.next().ok());

  FrameReader tiny(kDefaultMaxFrameBytes);
  const auto z = prefix(0);
  tiny.append(z.data(), z.size());
  CHECK_FALSE(tiny.next().ok());
}

TEST_CASE("a truncated frame waits; the verifier rejects garbage and wrong identifiers") {
  auto frame = bytes_of(encode_generate(5, text_prompt("hello"), SamplingParams{}, false, true));
  FrameReader reader(kDefaultMaxFrameBytes);
  reader.append(frame.data(), frame.size() - 3);
  auto f = reader.next();
  REQUIRE(f.ok());
  CHECK(f->empty());
  CHECK(reader.buffered() == frame.size() - 3);

  std::vector<uint8_t> garbage = prefix(64);
  for (int i = 0; i < 64; ++i) garbage.push_back(uint8_t(0xA5 ^ i));
  CHECK_FALSE(verify_request(garbage).ok());

  auto wrong_id = frame;
  std::memcpy(wrong_id.data() + kPrefixBytes + 4, "XXXX", 4);
  auto v = verify_request(wrong_id);
  REQUIRE_FALSE(v.ok());
  CHECK(v.error().message.find("identifier") != std::string::npos);

  // A valid header with a root offset that points outside the buffer.
  auto bad_offset = frame;
  bad_offset[kPrefixBytes] = 0xF0;
  bad_offset[kPrefixBytes + 1] = 0xFF;
  CHECK_FALSE(verify_request(bad_offset).ok());

  // A reply is not a request even though both carry "TNDM": the verifier checks the tables.
  CHECK(verify_request(frame).ok());
  CHECK(verify_reply(bytes_of(encode_health(1, true, "serving"))).ok());
}

TEST_CASE("generate requests round-trip with vLLM sampling names and unset optionals") {
  SamplingParams s;
  s.temperature = 0.5f;
  s.top_k = 40;
  s.seed = 1234;
  s.stop = {"\n\n", "END"};
  s.stop_token_ids = {7, 9};
  s.max_tokens = 33;
  s.min_tokens = 2;
  s.skip_special_tokens = false;
  PromptInput chat;
  chat.kind = PromptInput::Kind::kMessages;
  chat.messages = nlohmann::ordered_json::array(
      {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}});
  chat.add_generation_prompt = false;
  chat.template_kwargs = {{"enable_thinking", false}};
  auto bytes = bytes_of(encode_generate(9, chat, s, true, false));
  auto req = verify_request(bytes);
  REQUIRE(req.ok());
  auto call = decode_generate(*(*req)->body_as_GenerateRequest());
  REQUIRE(call.ok());
  CHECK_FALSE(call->stream);
  CHECK(call->max_tokens_set);
  CHECK(call->prompt.kind == PromptInput::Kind::kMessages);
  CHECK(call->prompt.messages == chat.messages);
  CHECK_FALSE(call->prompt.add_generation_prompt);
  CHECK(call->prompt.template_kwargs == chat.template_kwargs);
  const SamplingParams& d = call->sampling;
  CHECK(d.temperature == 0.5f);
  CHECK_FALSE(d.top_p.has_value());
  CHECK(d.top_k == 40);
  CHECK_FALSE(d.repetition_penalty.has_value());
  CHECK(d.seed == uint64_t(1234));
  CHECK(d.stop == s.stop);
  CHECK(d.stop_token_ids == s.stop_token_ids);
  CHECK(d.max_tokens == 33);
  CHECK(d.min_tokens == 2);
  CHECK_FALSE(d.skip_special_tokens);

  auto defaults = bytes_of(encode_generate(1, text_prompt("x"), SamplingParams{}, false, true));
  auto plain = decode_generate(*(*verify_request(defaults))->body_as_GenerateRequest());
  REQUIRE(plain.ok());
  CHECK_FALSE(plain->max_tokens_set);
  CHECK_FALSE(plain->sampling.temperature.has_value());
  CHECK(plain->sampling.skip_special_tokens);
}

TEST_CASE("decode_generate names what is wrong with a verified but unusable request") {
  auto decode = [](const PromptInput& p) {
    auto bytes = bytes_of(encode_generate(1, p, SamplingParams{}, false, true));
    return decode_generate(*(*verify_request(bytes))->body_as_GenerateRequest());
  };
  auto empty = decode(text_prompt(""));
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.error().message.find("prompt.text") != std::string::npos);

  PromptInput ids;
  ids.kind = PromptInput::Kind::kTokenIds;
  ids.token_ids = {3, -4};
  auto negative = decode(ids);
  REQUIRE_FALSE(negative.ok());
  CHECK(negative.error().code == ErrorCode::kInvalidArgument);

  PromptInput no_role;
  no_role.kind = PromptInput::Kind::kMessages;
  no_role.messages = nlohmann::ordered_json::array({{{"content", "hi"}}});
  CHECK_FALSE(decode(no_role).ok());

  // A request without a prompt union at all.
  flatbuffers::FlatBufferBuilder fbb;
  auto body = wire::CreateGenerateRequest(fbb);
  fbb.FinishSizePrefixed(
      wire::CreateRequest(fbb, 1, wire::RequestBody::GenerateRequest, body.Union()),
      kFileIdentifier);
  std::vector<uint8_t> raw(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  auto none = decode_generate(*(*verify_request(raw))->body_as_GenerateRequest());
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().code == ErrorCode::kProtocol);

  // A union type with no value passes the Verifier; found by the fuzzer (a null dereference).
  flatbuffers::FlatBufferBuilder empty_body;
  empty_body.FinishSizePrefixed(
      wire::CreateRequest(empty_body, 1, wire::RequestBody::GenerateRequest, 0), kFileIdentifier);
  std::vector<uint8_t> no_body(empty_body.GetBufferPointer(),
                               empty_body.GetBufferPointer() + empty_body.GetSize());
  auto v = verify_request(no_body);
  REQUIRE_FALSE(v.ok());
  CHECK(v.error().message.find("no body") != std::string::npos);

  flatbuffers::FlatBufferBuilder empty_prompt;
  auto gen = wire::CreateGenerateRequest(empty_prompt, wire::Prompt::TextPrompt, 0);
  empty_prompt.FinishSizePrefixed(
      wire::CreateRequest(empty_prompt, 1, wire::RequestBody::GenerateRequest, gen.Union()),
      kFileIdentifier);
  std::vector<uint8_t> no_prompt(empty_prompt.GetBufferPointer(),
                                 empty_prompt.GetBufferPointer() + empty_prompt.GetSize());
  auto np = verify_request(no_prompt);
  REQUIRE(np.ok());
  CHECK_FALSE(decode_generate(*(*np)->body_as_GenerateRequest()).ok());
}

TEST_CASE("replies round-trip: finished, status, error") {
  FinishEvent fin;
  fin.reason = FinishReason::kError;
  fin.error = make_error(ErrorCode::kTransport, "KV ship timed out");
  fin.usage = {12, 3};
  fin.timings.ttft_ms = 4.5;
  fin.timings.decode_steps = 3;
  fin.spec = SpecStats{3, 10, 7, {4, 3}};
  fin.text_tail = "tail";
  auto bytes = bytes_of(encode_finished(77, fin));
  auto reply = verify_reply(bytes);
  REQUIRE(reply.ok());
  CHECK((*reply)->id() == 77);
  FinishEvent back = decode_finished(77, *(*reply)->body_as_Finished());
  CHECK(back.reason == FinishReason::kError);
  REQUIRE(back.error.has_value());
  CHECK(back.error->code == ErrorCode::kTransport);
  CHECK(back.usage.prompt_tokens == 12);
  CHECK(back.timings.ttft_ms == 4.5);
  REQUIRE(back.spec.has_value());
  CHECK(back.spec->drafts == 3);
  CHECK(back.spec->proposed == 10);
  CHECK(back.spec->accepted == 7);
  CHECK(back.spec->accepted_per_position == std::vector<int64_t>{4, 3});
  CHECK(back.text_tail == "tail");

  DaemonStatus st;
  st.state = "serving";
  st.engine.running = 2;
  st.engine.pools.push_back(PoolStatus{"target", "cpu", 16, 100, 9, 4096, 30});
  DeviceMemory mem;
  mem.device = "cpu";
  mem.total_bytes = 5000;
  mem.resident_bytes = 1200;
  mem.host_available_bytes = 9000;
  mem.parts.push_back(MemoryPart{"other", 5000, "code"});
  st.engine.memory.push_back(mem);
  auto sb = bytes_of(encode_status(1, st));
  DaemonStatus sback = decode_status(*(*verify_reply(sb))->body_as_StatusReply());
  CHECK(sback.engine.running == 2);
  REQUIRE(sback.engine.pools.size() == 1);
  CHECK(status_json(sback)["pools"][0]["free_pages"] == 91);  // cached pages are free too
  CHECK(status_json(sback)["pools"][0]["cached_pages"] == 30);
  CHECK(sback.engine.pools[0].page_bytes == 4096);
  REQUIRE(sback.engine.memory.size() == 1);
  CHECK(sback.engine.memory[0].total_bytes == 5000);
  CHECK(sback.engine.memory[0].resident_bytes == 1200);
  CHECK(sback.engine.memory[0].host_available_bytes == 9000);
  CHECK(status_json(sback)["memory"][0]["resident_bytes"] == 1200);

  for (int c = 0; c <= int(ErrorCode::kInternal); ++c) {
    CHECK(from_wire(to_wire(ErrorCode(c))) == ErrorCode(c));
  }
  auto eb = bytes_of(encode_error(3, make_error(ErrorCode::kOverloaded, "busy")));
  Error e = decode_error((*verify_reply(eb))->body_as_ErrorInfo());
  CHECK(e.code == ErrorCode::kOverloaded);
  CHECK(e.message == "busy");
}

}  // namespace
}  // namespace tandem::daemon
