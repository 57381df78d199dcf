// Reads tokenizer.json into Pipeline. Every component type tandem does not implement is a
// kTokenizer error naming it, so a model never loads with silently different tokenization.
#include <array>
#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"

namespace tandem::tokenizer {
namespace {

using nlohmann::json;

// GPT-2's pattern, used by a ByteLevel pre-tokenizer with use_regex = true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Error tok_error(std::string message) {
  return make_error(ErrorCode::kTokenizer, "tokenizer.json: " + std::move(message));
}

// Ids index per-id tables sized by the largest one: a corrupt id of 2e9 would ask for 64 GB of
// them. Real vocabularies stay far below (Qwen2.5 152k, Llama 3 128k, Gemma 256k).
constexpr int64_t kMaxTokenId = (int64_t(1) << 24) - 1;

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string()
             ? j["type"].get<std::string>()
             : std::string("(missing type)");
}

bool flag(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

Status parse_normalizer(const json& j, std::vector<NormalForm>& out) {
  if (j.is_null()) return Status::Ok();
  std::string type = type_of(j);
  if (type == "Sequence") {
    for (const json& n : j.value("normalizers", json::array()))
      TANDEM_TRY(parse_normalizer(n, out));
    return Status::Ok();
  }
  if (type == "NFC") {
    out.push_back(NormalForm::kNfc);
  } else if (type == "NFD") {
    out.push_back(NormalForm::kNfd);
  } else if (type == "NFKC") {
    out.push_back(NormalForm::kNfkc);
  } else if (type == "NFKD") {
    out.push_back(NormalForm::kNfkd);
  } else {
    return tok_error("normalizer type '" + type + "' is not supported");
  }
  return Status::Ok();
}

Status parse_pre_tokenizer(const json& j, std::vector<PreTokenizerStep>& out) {
  if (j.is_null()) return Status::Ok();
  std::string type = type_of(j);
  if (type == "Sequence") {
    for (const json& p : j.value("pretokenizers", json::array())) {
      TANDEM_TRY(parse_pre_tokenizer(p, out));
    }
    return Status::Ok();
  }
  if (type == "Split") {
    const json& pattern = j.value("pattern", json::object());
    std::string regex;
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      regex = pattern["Regex"].get<std::string>();
    } else {
      return tok_error("pre_tokenizer Split: only a {\"Regex\": ...} pattern is supported");
    }
    std::string behavior = j.value("behavior", std::string());
    SplitBehavior b;
    if (behavior == "Isolated") {
      b = SplitBehavior::kIsolated;
    } else if (behavior == "Removed") {
      b = SplitBehavior::kRemoved;
    } else {
      return tok_error("pre_tokenizer Split behavior '" + behavior + "' is not supported");
    }
    TANDEM_ASSIGN_OR_RETURN(RegexSplit split,
                            RegexSplit::compile(regex, b, flag(j, "invert", false)));
    out.push_back({std::move(split), false});
    return Status::Ok();
  }
  if (type == "ByteLevel") {
    PreTokenizerStep step;
    step.add_prefix_space = flag(j, "add_prefix_space", false);
    // HF prepends the space to every piece present at this stage; tandem does it per segment
    // between added tokens, which is the same only when nothing split the text before.
    if (step.add_prefix_space && !out.empty()) {
      return tok_error(
          "pre_tokenizer ByteLevel add_prefix_space after another pre-tokenizer "
          "is not supported");
    }
    if (flag(j, "use_regex", true)) {
      TANDEM_ASSIGN_OR_RETURN(RegexSplit split,
                              RegexSplit::compile(kGpt2Pattern, SplitBehavior::kIsolated, false));
      step.split = std::move(split);
    }
    out.push_back(std::move(step));
    return Status::Ok();
  }
  return tok_error("pre_tokenizer type '" + type + "' is not supported");
}

// Post-processors: ByteLevel only trims offsets (ids unchanged); TemplateProcessing's "single"
// template gives the ids around the text.
Status parse_post_processor(const json& j, Pipeline& impl) {
  if (j.is_null()) return Status::Ok();
  std::string type = type_of(j);
  if (type == "Sequence") {
    for (const json& p : j.value("processors", json::array())) {
      TANDEM_TRY(parse_post_processor(p, impl));
    }
    return Status::Ok();
  }
  if (type == "ByteLevel") return Status::Ok();
  if (type != "TemplateProcessing") {
    return tok_error("post_processor type '" + type + "' is not supported");
  }
  impl.has_template = true;
  impl.post_prefix.clear();
  impl.post_suffix.clear();
  const json& specials = j.value("special_tokens", json::object());
  bool seen_sequence = false;
  for (const json& piece : j.value("single", json::array())) {
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken")) {
      return tok_error("post_processor TemplateProcessing: unknown template piece " + piece.dump());
    }
    std::string name = piece["SpecialToken"].value("id", std::string());
    auto it = specials.find(name);
    if (it == specials.end() || !it->contains("ids")) {
      return tok_error("post_processor TemplateProcessing: special token '" + name +
                       "' missing from special_tokens");
    }
    auto& dst = seen_sequence ? impl.post_suffix : impl.post_prefix;
    for (const json& id : (*it)["ids"]) {
      const int64_t v = id.is_number_integer() ? id.get<int64_t>() : -1;
      if (v < 0 || v >= int64_t(impl.id_bytes.size())) {
        return tok_error("post_processor TemplateProcessing: special token '" + name + "' has id " +
                         id.dump() + ", not a token of the vocabulary");
      }
      dst.push_back(int32_t(v));
    }
  }
  return Status::Ok();
}

Status check_bpe_options(const json& model) {
  if (type_of(model) != "BPE")
    return tok_error("model type '" + type_of(model) + "' is not supported");
  if (flag(model, "byte_fallback", false))
    return tok_error("model BPE byte_fallback is not supported");
  if (model.contains("dropout") && model["dropout"].is_number() &&
      model["dropout"].get<double>() > 0.0) {
    return tok_error("model BPE dropout is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      return tok_error(std::string("model BPE ") + key + " is not supported");
    }
  }
  return Status::Ok();
}

// model.vocab's entries and model.merges' members, taken out of the document while it is
// parsed (BigLists::collect): Qwen's 151k of each as DOM nodes (a std::map node and its strings
// per vocab entry) cost more to build, copy and free than the rest of loading (NOTES v44).
struct BigLists {
  std::vector<std::pair<std::string, json>> vocab;  // file order
  std::vector<json> merges;                         // file order
  std::string nested_vocab_value;                   // a vocab entry whose value is a container
  std::string key;                                  // the vocab entry being read

  // A parser callback: the document keeps model.vocab and model.merges as empty containers
  // (their types still checked) and everything else as parsed. Depths as nlohmann counts them:
  // the root's keys at 1, model's keys at 2, the lists' members at 3.
  json::parser_callback_t collect() {
    return [this, path = std::array<std::string, 3>{}](int depth, json::parse_event_t event,
                                                       json& parsed) mutable {
      using E = json::parse_event_t;
      if (event == E::key && depth <= 2) {
        path[size_t(depth)] = parsed.get<std::string>();
        return true;
      }
      if (depth < 3 || path[1] != "model") return true;
      if (path[2] == "vocab") {
        if (depth > 3) return true;  // inside a container value, refused below
        switch (event) {
          case E::key:
            key = parsed.get<std::string>();
            return false;  // the entry lives in `vocab`, not in the document
          case E::value:
            vocab.emplace_back(std::move(key), std::move(parsed));
            return false;
          case E::object_start:
          case E::array_start:
            if (nested_vocab_value.empty()) nested_vocab_value = key.empty() ? "?" : key;
            return false;
          default:
            return true;
        }
      }
      if (path[2] == "merges" && depth == 3) {
        // A member is a string ("a b") or a pair (["a", "b"]): a scalar at its value event, a
        // container once complete.
        if (event == E::value || event == E::array_end || event == E::object_end) {
          merges.push_back(std::move(parsed));
          return false;
        }
      }
      return true;
    };
  }
};

Result<BpeModel> parse_bpe(const json& model, BigLists& lists, Pipeline& impl) {
  TANDEM_TRY(check_bpe_options(model));
  const auto vocab_at = model.find("vocab");
  if (vocab_at == model.end() || !vocab_at->is_object() || lists.vocab.empty()) {
    return tok_error("model.vocab is missing or empty");
  }
  if (!lists.nested_vocab_value.empty()) {
    return tok_error("model.vocab: the id of '" + lists.nested_vocab_value + "' is not an integer");
  }
  bool ignore_merges = flag(model, "ignore_merges", false);
  std::unordered_map<std::string, int32_t> piece_ids;  // raw bytes -> id, for ignore_merges
  if (ignore_merges) piece_ids.reserve(lists.vocab.size());
  impl.token_ids.reserve(lists.vocab.size() + 1024);
  int32_t max_id = -1;
  for (auto& [token, value] : lists.vocab) {
    if (!value.is_number_integer()) {
      return tok_error("model.vocab: the id of '" + token + "' is not an integer");
    }
    const int64_t wide = value.get<int64_t>();
    if (wide < 0) return tok_error("model.vocab: negative id for '" + token + "'");
    if (wide > kMaxTokenId) {
      return tok_error("model.vocab: id " + std::to_string(wide) + " of '" + token + "' is past " +
                       std::to_string(kMaxTokenId));
    }
    const int32_t id = int32_t(wide);
    max_id = std::max(max_id, id);
    impl.token_ids.insert_or_assign(std::move(token), id);  // a repeated key: the last, as JSON
  }
  impl.id_bytes.assign(size_t(max_id) + 1, std::string());
  for (const auto& [token, id] : impl.token_ids) {
    std::optional<std::string> bytes = token_chars_to_bytes(token);
    std::string raw = bytes ? std::move(*bytes) : token;
    if (ignore_merges) piece_ids.emplace(raw, id);
    impl.id_bytes[size_t(id)] = std::move(raw);
  }
  std::vector<int32_t> byte_ids(256, -1);
  for (int b = 0; b < 256; ++b) {
    auto it = impl.token_ids.find(byte_to_token_char(uint8_t(b)));
    if (it != impl.token_ids.end()) byte_ids[size_t(b)] = it->second;
  }
  const auto merges_at = model.find("merges");
  if (merges_at != model.end() && !merges_at->is_array()) {
    return tok_error("model.merges is not a list");
  }
  const std::vector<json>& merges = lists.merges;
  std::unordered_map<uint64_t, MergeResult> merge_map;
  merge_map.reserve(merges.size());
  std::string_view left, right;
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return tok_error("model.merges[" + std::to_string(rank) + "] '" + s +
                         "' is not two tokens");
      }
      left = std::string_view(s).substr(0, sp);
      right = std::string_view(s).substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get_ref<const std::string&>();
      right = m[1].get_ref<const std::string&>();
    } else {
      return tok_error("model.merges[" + std::to_string(rank) + "] is not a pair of tokens");
    }
    auto l = impl.token_ids.find(left);
    auto r = impl.token_ids.find(right);
    joined.assign(left).append(right);
    auto merged = impl.token_ids.find(std::string_view(joined));
    if (l == impl.token_ids.end() || r == impl.token_ids.end() || merged == impl.token_ids.end()) {
      return tok_error("model.merges[" + std::to_string(rank) + "] '" + std::string(left) + " " +
                       std::string(right) + "' uses a token missing from the vocabulary");
    }
    // A repeated pair keeps its last rank, as HF's map collection does.
    merge_map.insert_or_assign(BpeModel::pair_key(l->second, r->second),
                               MergeResult{int32_t(rank), merged->second});
  }
  return BpeModel(std::move(byte_ids), std::move(merge_map), std::move(piece_ids), ignore_merges);
}

Status parse_added_tokens(const json& added, Pipeline& impl) {
  std::vector<AddedToken> raw, normalized;
  for (const json& a : added) {
    AddedToken t;
    const int64_t id =
        a.contains("id") && a["id"].is_number_integer() ? a["id"].get<int64_t>() : -1;
    t.id = id > kMaxTokenId ? -1 : int32_t(id);
    t.content = a.value("content", std::string());
    if (t.id < 0 || t.content.empty())
      return tok_error("added_tokens entry " + a.dump() + " is invalid");
    t.special = flag(a, "special", false);
    t.lstrip = flag(a, "lstrip", false);
    t.rstrip = flag(a, "rstrip", false);
    t.single_word = flag(a, "single_word", false);
    t.normalized = flag(a, "normalized", !t.special);
    if (size_t(t.id) >= impl.id_bytes.size()) {
      impl.id_bytes.resize(size_t(t.id) + 1);
      impl.id_special.resize(size_t(t.id) + 1, 0);
    }
    // The ByteLevel decoder maps an added token's characters like any other token's.
    std::optional<std::string> bytes = token_chars_to_bytes(t.content);
    impl.id_bytes[size_t(t.id)] = bytes ? *bytes : t.content;
    impl.id_special[size_t(t.id)] = t.special ? 1 : 0;
    impl.token_ids.insert_or_assign(t.content, t.id);
    (t.normalized ? normalized : raw).push_back(std::move(t));
  }
  impl.raw_added = AddedTokenMatcher(std::move(raw));
  impl.normalized_added = AddedTokenMatcher(std::move(normalized));
  return Status::Ok();
}

Status check_decoder(const json& j) {
  std::string type = type_of(j);
  if (type == "ByteLevel") return Status::Ok();
  if (j.is_null()) return tok_error("decoder is missing (ByteLevel is required)");
  return tok_error("decoder type '" + type + "' is not supported");
}

Result<Pipeline> parse_tokenizer_json_checked(std::string_view json_text) {
  BigLists lists;
  json j = json::parse(json_text, lists.collect(), /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return tok_error("not a JSON object");
  Pipeline pipeline;
  Pipeline* impl = &pipeline;
  TANDEM_TRY(parse_normalizer(j.value("normalizer", json()), impl->normalizer));
  TANDEM_TRY(parse_pre_tokenizer(j.value("pre_tokenizer", json()), impl->pre_tokenizer));
  TANDEM_TRY(check_decoder(j.value("decoder", json())));
  if (!j.contains("model")) return tok_error("model is missing");
  TANDEM_ASSIGN_OR_RETURN(BpeModel bpe, parse_bpe(j["model"], lists, *impl));
  impl->bpe.emplace(std::move(bpe));
  impl->id_special.resize(impl->id_bytes.size(), 0);
  TANDEM_TRY(parse_added_tokens(j.value("added_tokens", json::array()), *impl));
  TANDEM_TRY(parse_post_processor(j.value("post_processor", json()), *impl));
  return pipeline;
}

}  // namespace

// A field of the wrong JSON type throws inside nlohmann; that is a broken file, not a crash.
Result<Pipeline> parse_tokenizer_json(std::string_view json_text) {
  try {
    return parse_tokenizer_json_checked(json_text);
  } catch (const nlohmann::json::exception& e) {
    return tok_error(std::string("unexpected field type: ") + e.what());
  }
}

}  // namespace tandem::tokenizer
