// Requests to the FakeEngine (fake_engine.h) and the tokens it answers, shared by the server's
// unit tests and the daemon's black-box tests (which see the FakeEngine only through tandemd_fake).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/frontend.h"
#include "sampling/sampling_params.h"

namespace tandem::testing {

// The token that follows `last` in every FakeEngine output.
inline int32_t fake_next_token(int32_t last) {
  return (last + 7) % 1000;
}

// The FakeEngine's n tokens after `last`.
inline std::vector<int32_t> fake_tokens(int32_t last, int32_t n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(last = fake_next_token(last));
  return out;
}

inline PromptInput ids_prompt(std::vector<int32_t> ids) {
  PromptInput p;
  p.kind = PromptInput::Kind::kTokenIds;
  p.token_ids = std::move(ids);
  return p;
}

inline SamplingParams max_tokens(int32_t n) {
  SamplingParams s;
  s.max_tokens = n;
  return s;
}

}  // namespace tandem::testing
