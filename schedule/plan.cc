#include "schedule/plan.h"

namespace stateflow::schedule {

std::string_view StagePlacementName(StagePlacement placement) {
  return placement == StagePlacement::kVShape ? "v" : "loop";
}

std::optional<StagePlacement> ParseStagePlacement(std::string_view name) {
  if (name == "loop") return StagePlacement::kLoop;
  if (name == "v") return StagePlacement::kVShape;
  return std::nullopt;
}

std::size_t Plan::num_actions() const {
  std::size_t total = 0;
  for (const std::vector<Action>& actions : per_stage_) total += actions.size();
  return total;
}

bool Plan::HasWeightPass(const std::vector<std::vector<Action>>& per_stage) {
  for (const std::vector<Action>& actions : per_stage) {
    for (const Action& a : actions) {
      if (a.pass == Pass::kWeight) return true;
    }
  }
  return false;
}

}  // namespace stateflow::schedule
