#include "engine/frontend.h"

#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tandem {

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
  context["messages"] = messages;
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
