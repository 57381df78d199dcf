// Chat templates: the Jinja subset that the Qwen2.5, Qwen3 and Llama-3.1/3.2 templates use,
// rendered the way transformers' apply_chat_template renders them.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tandem {

class ChatTemplate {
 public:
  // Parse once at start; syntax outside the supported subset is a kTemplate error naming the
  // construct and line.
  static Result<ChatTemplate> parse(std::string_view source);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // context: {"messages": [...], "add_generation_prompt": bool, "bos_token": "...",
  // "eos_token": "...", "tools": ..., extra kwargs such as "enable_thinking"}.
  Result<std::string> render(const nlohmann::json& context) const;

 private:
  ChatTemplate();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
