// Turns what a client sends (plain text, chat messages or token ids) into prompt ids, the way
// vLLM's OpenAI server does: text is encoded with the tokenizer's special tokens (Llama's BOS),
// chat messages are rendered with the model's chat template and encoded without adding any.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tandem {

class Tokenizer;
class ChatTemplate;

struct PromptInput {
  enum class Kind { kText, kMessages, kTokenIds } kind = Kind::kText;
  std::string text;
  // Ordered: tojson in templates must print keys in the client's order, as transformers does.
  nlohmann::ordered_json messages;  // [{"role": ..., "content": ...}, ...]
  std::vector<int32_t> token_ids;
  bool add_generation_prompt = true;
  nlohmann::ordered_json template_kwargs =
      nlohmann::ordered_json::object();  // e.g. enable_thinking, tools
};

struct BuiltPrompt {
  std::vector<int32_t> ids;
  std::string rendered;  // the text that was encoded (the rendered chat prompt for messages)
};

// chat_template may be null (the model ships none): chat input is then a kTemplate error.
Result<BuiltPrompt> build_prompt(const Tokenizer& tokenizer, const ChatTemplate* chat_template,
                                 const PromptInput& input);

// Each message's content as the string the templates read (Qwen2.5 / Qwen3 / Llama 3.x all
// take content as a string), the way vLLM's OpenAI server hands it to them: a list of OpenAI
// content parts becomes its text parts ({"type": "text", "text": ...}, or plain strings) joined
// with "\n"; null or absent (an assistant turn of tool calls) becomes "". Any other part
// (image_url, audio, ...) or content type is a kInvalidArgument naming the message. Passed as
// they came, a list reached the template as its Python repr (Llama 3.1 rendered
// "[{'type': 'text', ...}]" as the prompt), null as "None", and Qwen3's failed inside it.
Result<nlohmann::ordered_json> content_as_text(const nlohmann::ordered_json& messages);

// Renders messages (their content as text, above) with the template and the tokenizer's bos/eos
// strings.
Result<std::string> render_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const nlohmann::ordered_json& template_kwargs);

}  // namespace tandem
