#include "engine/frontend.h"

#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tandem {

namespace {

// A list of content parts as one string: text parts ({"type": "text", "text": ...} or plain
// strings) joined with "\n", as vLLM joins them.
Result<std::string> join_text_parts(const nlohmann::ordered_json& parts, const std::string& where) {
  std::string text;
  for (size_t j = 0; j < parts.size(); ++j) {
    const nlohmann::ordered_json& part = parts[j];
    const std::string at = where + "[" + std::to_string(j) + "]";
    const bool typed = part.is_object() && part.contains("type") && part["type"].is_string();
    const bool text_part = typed && part["type"] == "text";
    if (!part.is_string() && !text_part) {
      return make_error(ErrorCode::kInvalidArgument,
                        at + ": content part '" +
                            (typed ? part["type"].get<std::string>() : part.dump()) +
                            "' is not supported; this model takes text parts only");
    }
    if (text_part && !(part.contains("text") && part["text"].is_string())) {
      return make_error(ErrorCode::kInvalidArgument, at + ": a text part needs a string \"text\"");
    }
    if (j > 0) text += '\n';
    text += text_part ? part["text"].get<std::string>() : part.get<std::string>();
  }
  return text;
}

}  // namespace

Result<nlohmann::ordered_json> content_as_text(const nlohmann::ordered_json& messages) {
  nlohmann::ordered_json out = messages;
  for (size_t i = 0; i < out.size(); ++i) {
    nlohmann::ordered_json& m = out[i];
    if (!m.is_object()) continue;
    const std::string where = "messages[" + std::to_string(i) + "].content";
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      m["content"] = "";  // an assistant turn of tool calls only
    } else if (content->is_array()) {
      TANDEM_ASSIGN_OR_RETURN(*content, join_text_parts(*content, where));
    } else if (!content->is_string()) {
      return make_error(ErrorCode::kInvalidArgument,
                        where + " must be a string, a list of text parts or null");
    }
  }
  return out;
}

Result<std::string> render_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const nlohmann::ordered_json& template_kwargs) {
  if (!messages.is_array() || messages.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "messages must be a non-empty JSON array");
  }
  for (const auto& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "each message must be an object with a string \"role\"");
    }
  }
  nlohmann::ordered_json context =
      template_kwargs.is_object() ? template_kwargs : nlohmann::ordered_json::object();
  TANDEM_ASSIGN_OR_RETURN(context["messages"], content_as_text(messages));
  context["add_generation_prompt"] = add_generation_prompt;
  const TokenizerConfig& cfg = tokenizer.config();
  // Like transformers: a missing special token is None in the template, not "".
  context["bos_token"] = cfg.bos_token ? nlohmann::ordered_json(*cfg.bos_token) : nullptr;
  context["eos_token"] = cfg.eos_token ? nlohmann::ordered_json(*cfg.eos_token) : nullptr;
  if (cfg.pad_token) context["pad_token"] = *cfg.pad_token;
  return chat_template.render(context);
}

Result<BuiltPrompt> build_prompt(const Tokenizer& tokenizer, const ChatTemplate* chat_template,
                                 const PromptInput& input) {
  BuiltPrompt out;
  switch (input.kind) {
    case PromptInput::Kind::kTokenIds: {
      const int32_t vocab = tokenizer.vocab_size();
      for (int32_t id : input.token_ids) {
        if (id < 0 || id >= vocab) {
          return make_error(ErrorCode::kInvalidArgument, "prompt token id " + std::to_string(id) +
                                                             " is outside the vocabulary [0, " +
                                                             std::to_string(vocab) + ")");
        }
      }
      out.ids = input.token_ids;
      out.rendered = tokenizer.decode(out.ids, /*skip_special_tokens=*/false);
      break;
    }
    case PromptInput::Kind::kText:
      out.rendered = input.text;
      out.ids = tokenizer.encode(input.text, /*add_special_tokens=*/true);
      break;
    case PromptInput::Kind::kMessages: {
      if (chat_template == nullptr) {
        return make_error(ErrorCode::kTemplate,
                          "this model has no chat_template in tokenizer_config.json; send a "
                          "plain prompt instead of messages");
      }
      TANDEM_ASSIGN_OR_RETURN(out.rendered,
                              render_chat(tokenizer, *chat_template, input.messages,
                                          input.add_generation_prompt, input.template_kwargs));
      out.ids = tokenizer.encode(out.rendered, /*add_special_tokens=*/false);
      break;
    }
  }
  if (out.ids.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "the prompt is empty");
  }
  return out;
}

}  // namespace tandem
