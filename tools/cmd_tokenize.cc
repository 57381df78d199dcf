// `tandem tokenize`: ids for text, or the rendered chat prompt and its ids. Loads only the
// tokenizer files, never the weights.
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "commands.h"
#include "engine/frontend.h"
#include "tokenizer/tokenizer.h"

namespace tandem::cli {

void register_tokenize(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("tokenize", "Tokenize text or a chat conversation");
  struct Flags {
    std::string model, text, messages;
    bool add_generation_prompt = false, json = false, has_text = false;
  };
  auto f = std::make_shared<Flags>();
  cmd->add_option("--model", f->model, "Model directory (tokenizer.json, tokenizer_config.json)")
      ->required();
  auto* text = cmd->add_option("--text", f->text, "Text; no special tokens are added");
  auto* msgs = cmd->add_option("--messages", f->messages, "JSON file with chat messages");
  text->excludes(msgs);
  cmd->add_flag("--add-generation-prompt", f->add_generation_prompt);
  cmd->add_flag("--json", f->json, "Print {\"ids\": [...], \"text\": ...}");
  cmd->callback([f, text, msgs, &exit_code] {
    auto fail = [&](const Error& e) {
      std::fprintf(stderr, "tandem tokenize: %s\n", e.to_string().c_str());
      exit_code = 1;
    };
    if (text->count() + msgs->count() != 1) {
      return fail(
          make_error(ErrorCode::kInvalidArgument, "give exactly one of --text, --messages"));
    }
    auto tok = Tokenizer::load(f->model);
    if (!tok) return fail(tok.error());
    std::string rendered;
    std::vector<int32_t> ids;
    if (text->count()) {
      rendered = f->text;
      ids = tok->encode(rendered, /*add_special_tokens=*/false);
    } else {
      std::ifstream file(f->messages);
      if (!file) return fail(make_error(ErrorCode::kIo, "--messages: cannot open " + f->messages));
      nlohmann::ordered_json doc = nlohmann::ordered_json::parse(file, nullptr, false);
      if (doc.is_discarded()) {
        return fail(make_error(ErrorCode::kInvalidArgument, "--messages: not valid JSON"));
      }
      nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
      if (doc.is_object() && doc.contains("messages")) {
        for (auto& [k, v] : doc.items()) {
          if (k != "messages") kwargs[k] = v;
        }
        doc = doc["messages"];
      }
      if (tok->config().chat_template.empty()) {
        return fail(make_error(ErrorCode::kTemplate, "the model has no chat_template"));
      }
      auto tmpl = ChatTemplate::parse(tok->config().chat_template);
      if (!tmpl) return fail(tmpl.error());
      auto r = render_chat(*tok, *tmpl, doc, f->add_generation_prompt, kwargs);
      if (!r) return fail(r.error());
      rendered = std::move(*r);
      ids = tok->encode(rendered, /*add_special_tokens=*/false);
    }
    if (f->json) {
      nlohmann::ordered_json j;
      j["ids"] = ids;
      j["text"] = rendered;
      std::cout << j.dump() << std::endl;
    } else {
      for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
      std::cout << std::endl;
    }
  });
}

}  // namespace tandem::cli
