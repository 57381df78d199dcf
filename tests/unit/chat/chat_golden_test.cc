// The four real templates against renders made by transformers' apply_chat_template
// (scripts/golden/chat_golden.py on the GPU machine): byte-for-byte equality.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "test_paths.h"

using namespace tandem;
using ojson = nlohmann::ordered_json;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("real chat templates render exactly what transformers renders") {
  const std::string dir = testing::golden_dir() + "/chat";
  ojson golden = ojson::parse(read_file(dir + "/chat_golden.json"));
  // The script pinned strftime_now to this instant (UTC noon, same date in every time zone).
  auto now = std::chrono::system_clock::from_time_t(golden["fixed_now_unix"].get<std::time_t>());
  int cases = 0;
  for (const auto& [name, entry] : golden["templates"].items()) {
    auto tmpl = ChatTemplate::parse(read_file(dir + "/templates/" + name + ".jinja"));
    REQUIRE_MESSAGE(tmpl.ok(), name << ": " << (tmpl.ok() ? "" : tmpl.error().message));
    for (const auto& c : entry["cases"]) {
      CAPTURE(name);
      CAPTURE(c["name"].get<std::string>());
      ojson context = c["context"];
      for (const auto& [k, v] : entry["special_tokens"].items()) context[k] = v;
      auto rendered = tmpl->render(context, now);
      if (c.contains("error")) {
        REQUIRE_FALSE(rendered.ok());
        CHECK(rendered.error().code == ErrorCode::kTemplate);
        CHECK(rendered.error().message == c["error"].get<std::string>());
      } else {
        REQUIRE_MESSAGE(rendered.ok(), (rendered.ok() ? "" : rendered.error().message));
        CHECK(*rendered == c["rendered"].get<std::string>());
      }
      ++cases;
    }
  }
  CHECK(cases >= 32);  // all four templates, ~8 conversations each
}

TEST_CASE("strftime_now follows the instant the caller fixes") {
  auto tmpl = ChatTemplate::parse("{{ strftime_now('%d %b %Y') }}");
  REQUIRE(tmpl.ok());
  auto rendered = tmpl->render(ojson::object(), std::chrono::system_clock::from_time_t(1741348800));
  REQUIRE(rendered.ok());
  CHECK(*rendered == "07 Mar 2025");
}

TEST_CASE("plain json context renders like ordered_json apart from key order") {
  auto tmpl =
      ChatTemplate::parse("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}");
  REQUIRE(tmpl.ok());
  nlohmann::json context = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto rendered = tmpl->render(context);
  REQUIRE(rendered.ok());
  CHECK(*rendered == "user:hi;");
}
