#include "tokenizer/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/check.h"

namespace tandem::tokenizer {
namespace {

// Match data and a JIT stack per thread: reused across matches and calls, never shared between
// threads encoding at once. Long whitespace runs backtrack deeply, hence the larger JIT stack.
struct ThreadMatchState {
  pcre2_match_data* match_data = pcre2_match_data_create(4, nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() {
    TANDEM_CHECK(match_data && jit_stack && context, "PCRE2 allocation failed");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match_data);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

size_t utf8_char_len(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xF0) return 4;
  if (c >= 0xE0) return 3;
  if (c >= 0xC0) return 2;
  return 1;
}

// HF compiles the pattern with Oniguruma, whose Unicode \s is exactly TAB..CR, U+0085 and the
// separators (Zs, Zl, Zp). PCRE2's \s also takes U+180E (no longer a separator since Unicode
// 6.3), which would cut " \u180e" differently. Spell \s and \S out as Oniguruma means them.
std::string with_oniguruma_spaces(const std::string& pattern) {
  static const std::string kSpaceItems = R"(\t\n\x0B\f\r\x{85}\p{Z})";
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char n = pattern[++i];
      if (n == 's') {
        out += in_class ? kSpaceItems : "[" + kSpaceItems + "]";
      } else if (n == 'S' && !in_class) {
        out += "[^" + kSpaceItems + "]";
      } else {
        out += c;  // any other escape (\S inside a class too) passes through unchanged
        out += n;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

struct RegexSplit::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  ~Impl() { pcre2_code_free(code); }
};

RegexSplit::RegexSplit() : impl_(std::make_unique<Impl>()) {}
RegexSplit::RegexSplit(RegexSplit&&) noexcept = default;
RegexSplit& RegexSplit::operator=(RegexSplit&&) noexcept = default;
RegexSplit::~RegexSplit() = default;

Result<RegexSplit> RegexSplit::compile(const std::string& pattern, SplitBehavior behavior,
                                       bool invert) {
  std::string rewritten = with_oniguruma_spaces(pattern);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return make_error(ErrorCode::kTokenizer,
                      "pre_tokenizer Split: regex does not compile at offset " +
                          std::to_string(err_offset) + ": " + reinterpret_cast<char*>(msg));
  }
  RegexSplit split;
  split.impl_->code = code;
  split.impl_->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  split.impl_->behavior = behavior;
  split.impl_->invert = invert;
  return split;
}

void RegexSplit::split(std::string_view text, size_t base,
                       std::vector<std::pair<size_t, size_t>>& out) const {
  ThreadMatchState& st = thread_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // Text reaching here is valid UTF-8 (normalized or checked by the caller).
  uint32_t options = PCRE2_NO_UTF_CHECK;
  auto emit = [&](size_t b, size_t e, bool is_match) {
    if (b == e) return;
    // With invert the pattern describes the gaps; Removed drops what the pattern describes.
    bool described = is_match != impl_->invert;
    if (impl_->behavior == SplitBehavior::kIsolated || !described) {
      out.emplace_back(base + b, base + e);
    }
  };
  size_t pos = 0, gap_start = 0;
  while (pos <= text.size()) {
    int rc =
        pcre2_match(impl_->code, subject, text.size(), pos, options, st.match_data, st.context);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && impl_->jit) {
      // The interpreter keeps its backtracking state on the heap: slower, never out of stack.
      rc = pcre2_match(impl_->code, subject, text.size(), pos, options | PCRE2_NO_JIT,
                       st.match_data, nullptr);
    }
    // NOMATCH ends the scan; so does a resource limit the interpreter hit on a pathological
    // input: the rest becomes one gap piece. Client text must never abort the daemon.
    if (rc < 0) break;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.match_data);
    size_t mb = ov[0], me = ov[1];
    if (me == mb) {  // an empty match cuts nothing; step over one character
      if (mb >= text.size()) break;
      pos = mb + utf8_char_len(uint8_t(text[mb]));
      continue;
    }
    emit(gap_start, mb, false);
    emit(mb, me, true);
    gap_start = pos = me;
  }
  emit(gap_start, text.size(), false);
}

}  // namespace tandem::tokenizer
