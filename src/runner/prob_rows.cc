#include "runner/prob_rows.h"

#include "core/check.h"

namespace tandem {

void check_sampled_drafts(std::span<const SampledDrafts> seqs, const ProbRows& draft_rows,
                          const ProbRows& target_rows, size_t results) {
  TANDEM_CHECK(results >= seqs.size(), "%zu results for %zu sequences", results, seqs.size());
  const int32_t width = target_rows.width();
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SampledDrafts& s = seqs[i];
    const size_t k = s.tokens.size();
    TANDEM_CHECK(s.rng != nullptr && s.draft_slots.size() == k,
                 "sequence %zu: %zu draft slots for %zu drafts", i, s.draft_slots.size(), k);
    TANDEM_CHECK(s.target_slot >= 0 && size_t(s.target_slot) + k + 1 <= size_t(target_rows.rows()),
                 "target rows [%d, %zu) of %d", s.target_slot, size_t(s.target_slot) + k + 1,
                 target_rows.rows());
    TANDEM_CHECK(k == 0 || draft_rows.width() == width, "draft rows of %d ids, target rows of %d",
                 draft_rows.width(), width);
    for (size_t j = 0; j < k; ++j) {
      TANDEM_CHECK(s.tokens[j] >= 0 && s.tokens[j] < width, "draft token %d", s.tokens[j]);
      TANDEM_CHECK(s.draft_slots[j] >= 0 && s.draft_slots[j] < draft_rows.rows(),
                   "draft slot %d of %d", s.draft_slots[j], draft_rows.rows());
    }
  }
}

}  // namespace tandem
