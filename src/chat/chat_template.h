// Chat templates: the Jinja subset that the Qwen2.5, Qwen3 and Llama-3.1/3.2 templates use,
// rendered the way transformers' apply_chat_template renders them.
#pragma once

#include <chrono>
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
  // "tools" and "documents" default to null as transformers always passes them. Object key
  // order reaches the output through tojson (tool schemas), so callers that have the request's
  // JSON should pass it as ordered_json; plain json has its keys sorted.
  // A template's raise_exception(msg) is a kTemplate Error whose message is msg.
  Result<std::string> render(const nlohmann::json& context) const;
  Result<std::string> render(const nlohmann::ordered_json& context) const;
  // As above with strftime_now() fixed to `now` (tests, reproducible prompts).
  Result<std::string> render(const nlohmann::ordered_json& context,
                             std::chrono::system_clock::time_point now) const;

 private:
  ChatTemplate();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
