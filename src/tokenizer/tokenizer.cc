#include "tokenizer/tokenizer.h"

#include <utf8proc.h>

#include <fstream>
#include <sstream>

#include "core/check.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"

namespace tandem {
namespace {

using tokenizer::NormalForm;

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIo, "cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return make_error(ErrorCode::kIo, "cannot read " + path);
  return ss.str();
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (uint8_t(c) >= 0x80) return false;
  }
  return true;
}

// Text from a client may be any bytes; the pipeline (like HF's, which takes a Rust &str) works on
// valid UTF-8, so invalid sequences become U+FFFD first.
std::string_view valid_utf8(std::string_view text, std::string& storage) {
  if (is_ascii(text)) return text;
  storage.clear();
  size_t consumed = tokenizer::append_utf8_lossy(text, /*at_end=*/true, storage);
  TANDEM_CHECK(consumed == text.size());
  if (storage == text) return text;  // nothing was replaced
  return storage;
}

std::string normalize(std::string_view text, const std::vector<NormalForm>& forms) {
  std::string cur(text);
  if (forms.empty() || is_ascii(text)) return cur;  // ASCII is invariant under every form
  for (NormalForm f : forms) {
    int options = UTF8PROC_STABLE;
    switch (f) {
      case NormalForm::kNfc:
        options |= UTF8PROC_COMPOSE;
        break;
      case NormalForm::kNfd:
        options |= UTF8PROC_DECOMPOSE;
        break;
      case NormalForm::kNfkc:
        options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        break;
      case NormalForm::kNfkd:
        options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        break;
    }
    utf8proc_uint8_t* dst = nullptr;
    utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(cur.data()),
                     utf8proc_ssize_t(cur.size()), &dst, static_cast<utf8proc_option_t>(options));
    TANDEM_CHECK(n >= 0, "utf8proc_map failed on valid UTF-8: %s", utf8proc_errmsg(n));
    cur.assign(reinterpret_cast<char*>(dst), size_t(n));
    std::free(dst);
  }
  return cur;
}

}  // namespace

struct Tokenizer::Impl : tokenizer::Pipeline {
  explicit Impl(tokenizer::Pipeline&& p) : Pipeline(std::move(p)) {}
};

namespace tokenizer {

// Normalized text without added tokens of the raw kind: find the normalized added tokens, then
// pre-tokenize and BPE what lies between them.
void Pipeline::encode_normalized(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::pair<size_t, size_t>> pieces, next;  // [pieces] byte ranges in `text`
  std::string prefixed;                                 // storage when add_prefix_space applies
  size_t pos = 0;
  while (pos <= text.size()) {
    auto m = normalized_added.empty() ? std::nullopt : normalized_added.find(text, pos);
    size_t seg_end = m ? m->begin : text.size();
    std::string_view seg = text.substr(pos, seg_end - pos);
    if (!seg.empty()) {
      // Prefix spaces change the text itself, so a segment that needs one is copied.
      std::string_view work = seg;
      for (const auto& step : pre_tokenizer) {
        if (step.add_prefix_space && work.front() != ' ') {
          prefixed.assign(1, ' ');
          prefixed.append(seg);
          work = prefixed;
          break;
        }
      }
      pieces.assign(1, {0, work.size()});
      for (const auto& step : pre_tokenizer) {
        if (!step.split) continue;
        next.clear();
        for (auto [b, e] : pieces) step.split->split(work.substr(b, e - b), b, next);
        pieces.swap(next);
      }
      for (auto [b, e] : pieces) bpe->encode_piece(work.substr(b, e - b), out);
    }
    if (!m) break;
    out.push_back(m->id);
    pos = m->end;
  }
}

void Pipeline::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  size_t pos = 0;
  while (pos <= text.size()) {
    auto m = raw_added.empty() ? std::nullopt : raw_added.find(text, pos);
    size_t seg_end = m ? m->begin : text.size();
    if (seg_end > pos) {
      std::string normalized = normalize(text.substr(pos, seg_end - pos), normalizer);
      encode_normalized(normalized, out);
    }
    if (!m) break;
    out.push_back(m->id);
    pos = m->end;
  }
}

}  // namespace tokenizer

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::load(const std::string& model_dir) {
  TANDEM_ASSIGN_OR_RETURN(std::string tokenizer_json, read_file(model_dir + "/tokenizer.json"));
  std::string config_json;
  std::string config_path = model_dir + "/tokenizer_config.json";
  if (std::ifstream(config_path).good()) {
    TANDEM_ASSIGN_OR_RETURN(config_json, read_file(config_path));
  }
  auto tok = from_json(tokenizer_json, config_json);
  if (!tok.ok()) {
    Error e = std::move(tok).take_error();
    e.message = model_dir + ": " + e.message;
    return e;
  }
  return tok;
}

Result<Tokenizer> Tokenizer::from_json(std::string_view tokenizer_json,
                                       std::string_view tokenizer_config_json) {
  TANDEM_ASSIGN_OR_RETURN(tokenizer::Pipeline pipeline,
                          tokenizer::parse_tokenizer_json(tokenizer_json));
  auto impl = std::make_unique<Impl>(std::move(pipeline));
  TANDEM_ASSIGN_OR_RETURN(impl->config, tokenizer::parse_tokenizer_config(tokenizer_config_json));
  auto lookup = [&](const std::optional<std::string>& name) -> std::optional<int32_t> {
    if (!name) return std::nullopt;
    auto it = impl->token_ids.find(*name);
    return it == impl->token_ids.end() ? std::nullopt : std::optional<int32_t>(it->second);
  };
  impl->bos = lookup(impl->config.bos_token);
  impl->eos = lookup(impl->config.eos_token);
  TokenizerConfig& cfg = impl->config;
  if (!impl->has_template) {
    // No template in the file: transformers builds one from add_bos_token/add_eos_token.
    if (cfg.add_bos_token && impl->bos) impl->post_prefix.push_back(*impl->bos);
    if (cfg.add_eos_token && impl->eos) impl->post_suffix.push_back(*impl->eos);
  }
  // The config then reports what encoding with special tokens really does (Llama 3's file
  // template adds <|begin_of_text|> without its config saying add_bos_token).
  cfg.add_bos_token = impl->bos && !impl->post_prefix.empty() && impl->post_prefix[0] == *impl->bos;
  cfg.add_eos_token =
      impl->eos && !impl->post_suffix.empty() && impl->post_suffix.back() == *impl->eos;
  Tokenizer tok;
  tok.impl_ = std::move(impl);
  return tok;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special_tokens) out = impl_->post_prefix;
  std::string storage;
  impl_->encode_text(valid_utf8(text, storage), out);
  if (add_special_tokens)
    out.insert(out.end(), impl_->post_suffix.begin(), impl_->post_suffix.end());
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= impl_->id_bytes.size()) continue;  // HF skips unknown ids
    if (skip_special_tokens && impl_->id_special[size_t(id)]) continue;
    bytes += impl_->id_bytes[size_t(id)];
  }
  std::string out;
  tokenizer::append_utf8_lossy(bytes, /*at_end=*/true, out);
  return out;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->id_bytes.size()) return {};
  return impl_->id_bytes[size_t(id)];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->token_ids.find(token);
  if (it == impl_->token_ids.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->id_special.size() && impl_->id_special[size_t(id)] != 0;
}

int32_t Tokenizer::vocab_size() const {
  return int32_t(impl_->id_bytes.size());
}
const TokenizerConfig& Tokenizer::config() const {
  return impl_->config;
}
std::optional<int32_t> Tokenizer::bos_id() const {
  return impl_->bos;
}
std::optional<int32_t> Tokenizer::eos_id() const {
  return impl_->eos;
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_(skip_special_tokens) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_ += tokenizer_->token_bytes(id);
  std::string out;
  size_t consumed = tokenizer::append_utf8_lossy(pending_, /*at_end=*/false, out);
  pending_.erase(0, consumed);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  tokenizer::append_utf8_lossy(pending_, /*at_end=*/true, out);
  pending_.clear();
  return out;
}

}  // namespace tandem
