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

// Renders messages with the template and the tokenizer's bos/eos strings.
Result<std::string> render_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const nlohmann::ordered_json& template_kwargs);

}  // namespace tandem
