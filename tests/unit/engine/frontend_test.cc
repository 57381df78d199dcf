// Chat messages as clients send them (OpenAI's shapes) reaching the model's template: content
// parts joined into the string the templates read, null content as "", anything else a typed
// error naming the message; and the same prompt whichever of the equivalent shapes came.
#include <doctest/doctest.h>

#include "chat/chat_template.h"
#include "engine/frontend.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

using namespace tandem;
using ojson = nlohmann::ordered_json;

namespace {

std::string error_of(const ojson& messages) {
  auto r = content_as_text(messages);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kInvalidArgument);
  return r.error().message;
}

}  // namespace

TEST_CASE("content parts join with newlines; null and absent content are empty") {
  const ojson messages = ojson::parse(R"([
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "a"}, "b", {"type": "text", "text": ""}]},
    {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f"}}]},
    {"role": "assistant"},
    {"role": "user", "content": []}
  ])");
  auto r = content_as_text(messages);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  const ojson& m = *r;
  CHECK(m[0]["content"] == "be brief");
  CHECK(m[1]["content"] == "a\nb\n");
  CHECK(m[2]["content"] == "");
  CHECK(m[2]["tool_calls"] == messages[2]["tool_calls"]);  // the rest of a message stays
  CHECK(m[3]["content"] == "");
  CHECK(m[4]["content"] == "");
  CHECK(m.size() == messages.size());
}

TEST_CASE("parts a text model cannot take, and content of other types, are errors naming them") {
  const std::string image = error_of(ojson::parse(
      R"([{"role": "user", "content": "x"}, {"role": "user", "content": [{"type": "text",
          "text": "look"}, {"type": "image_url", "image_url": {"url": "data:"}}]}])"));
  CHECK(image.find("messages[1].content[1]") != std::string::npos);
  CHECK(image.find("'image_url'") != std::string::npos);
  const std::string no_text =
      error_of(ojson::parse(R"([{"role": "user", "content": [{"type": "text"}]}])"));
  CHECK(no_text.find("messages[0].content[0]: a text part needs a string \"text\"") !=
        std::string::npos);
  const std::string number = error_of(ojson::parse(R"([{"role": "user", "content": 5}])"));
  CHECK(number.find("messages[0].content must be a string") != std::string::npos);
  error_of(ojson::parse(R"([{"role": "user", "content": [7]}])"));
  error_of(ojson::parse(R"([{"role": "user", "content": {"type": "text", "text": "a"}}])"));
}

TEST_CASE("Qwen3's template: parts render as the string would; tool-call turns with null content") {
  auto tok = Tokenizer::load(testing::qwen_tokenizer_dir());
  REQUIRE_MESSAGE(tok.ok(), tok.error().to_string());
  auto tmpl = ChatTemplate::parse(tok->config().chat_template);
  REQUIRE(tmpl.ok());
  const ojson none = ojson::object();
  auto as_string = render_chat(
      *tok, *tmpl, ojson::parse(R"([{"role": "user", "content": "hello\nthere"}])"), true, none);
  auto as_parts = render_chat(*tok, *tmpl, ojson::parse(R"([{"role": "user", "content": [
      {"type": "text", "text": "hello"}, {"type": "text", "text": "there"}]}])"),
                              true, none);
  REQUIRE_MESSAGE(as_string.ok(), as_string.error().to_string());
  REQUIRE_MESSAGE(as_parts.ok(), as_parts.error().to_string());
  CHECK(*as_parts == *as_string);
  // An assistant turn of tool calls only, as OpenAI clients send it (content null), then the
  // tool's answer: Qwen3's template reads content as a string ('<think>' in content).
  auto tools = render_chat(*tok, *tmpl, ojson::parse(R"([
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null,
       "tool_calls": [{"function": {"name": "get", "arguments": {"city": "Oslo"}}}]},
      {"role": "tool", "content": "cold"}])"),
                           true, none);
  REQUIRE_MESSAGE(tools.ok(), tools.error().to_string());
  CHECK(tools->find("<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Oslo\"}}") !=
        std::string::npos);
  CHECK(tools->find("None") == std::string::npos);
}
