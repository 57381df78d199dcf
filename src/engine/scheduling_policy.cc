#include "engine/scheduling_policy.h"

namespace tandem {

size_t FcfsPolicy::pick_victim(std::span<Sequence* const> candidates, const Sequence&) const {
  size_t youngest = 0;
  for (size_t i = 1; i < candidates.size(); ++i) {
    if (before(*candidates[youngest], *candidates[i])) youngest = i;
  }
  return youngest;
}

Result<std::shared_ptr<const SchedulingPolicy>> make_scheduling_policy(std::string_view name) {
  if (name == "fcfs") return std::shared_ptr<const SchedulingPolicy>(new FcfsPolicy());
  return make_error(ErrorCode::kInvalidArgument,
                    "scheduling_policy: unknown policy '" + std::string(name) + "' (known: fcfs)");
}

}  // namespace tandem
