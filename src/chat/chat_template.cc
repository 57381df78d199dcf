#include "chat/chat_template.h"

#include "chat/jinja_interpreter.h"
#include "chat/jinja_lexer.h"
#include "chat/jinja_parser.h"

namespace tandem {

struct ChatTemplate::Impl {
  jinja::Body body;
};

ChatTemplate::ChatTemplate() : impl_(std::make_unique<Impl>()) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  TANDEM_ASSIGN_OR_RETURN(auto tokens, jinja::lex(source));
  TANDEM_ASSIGN_OR_RETURN(auto body, jinja::parse(tokens));
  ChatTemplate t;
  t.impl_->body = std::move(body);
  return t;
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context) const {
  return render(nlohmann::ordered_json::parse(context.dump()));
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return render(context, std::chrono::system_clock::now());
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context,
                                         std::chrono::system_clock::time_point now) const {
  if (!context.is_object())
    return make_error(ErrorCode::kTemplate, "chat template context must be a JSON object");
  jinja::Value globals = jinja::from_json(context);
  for (const char* always : {"tools", "documents"})
    if (!globals.dict->find(always)) globals.dict->set(always, jinja::Value::none());
  try {
    jinja::Interpreter interpreter(std::chrono::system_clock::to_time_t(now));
    return interpreter.render(impl_->body, globals);
  } catch (const jinja::TemplateError& e) {
    return make_error(ErrorCode::kTemplate, e.what());
  }
}

}  // namespace tandem
