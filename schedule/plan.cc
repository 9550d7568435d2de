#include "schedule/plan.h"

namespace stateflow::schedule {

std::size_t Plan::num_actions() const {
  std::size_t total = 0;
  for (const std::vector<Action>& actions : per_stage_) total += actions.size();
  return total;
}

}  // namespace stateflow::schedule
