#include "schedule/plan.h"

#include <algorithm>

namespace stateflow::schedule {
namespace {

// [first, first + count) clipped to [0, size); count < 0 means to the end.
std::pair<long long, long long> Clip(long long first, long long count, long long size) {
  const long long begin = std::clamp(first, 0LL, size);
  const long long end = count < 0 ? size : std::clamp(first + count, begin, size);
  return {begin, end};
}

void AppendCell(std::string* line, const std::string& text, bool marked, std::size_t width) {
  std::string cell = marked ? "[" + text + "]" : " " + text + " ";
  cell.resize(std::max(width, cell.size()), ' ');
  *line += cell;
}

void AppendLine(std::string* out, std::string line) {
  while (!line.empty() && line.back() == ' ') line.pop_back();
  *out += line;
  *out += '\n';
}

}  // namespace

std::size_t Plan::num_actions() const {
  std::size_t total = 0;
  for (const std::vector<Action>& actions : per_stage_) total += actions.size();
  return total;
}

std::string PlanGrid(const Plan& plan, const Action* mark) {
  return PlanGrid(plan, mark, GridWindow{});
}

std::string PlanGrid(const Plan& plan, const Action* mark, const GridWindow& window) {
  const long long num_stages = static_cast<long long>(plan.per_stage().size());
  const auto [stage_begin, stage_end] = Clip(window.first_stage, window.num_stages, num_stages);
  long long max_steps = 0;
  for (const std::vector<Action>& actions : plan.per_stage()) {
    max_steps = std::max(max_steps, static_cast<long long>(actions.size()));
  }
  const auto [step_begin, step_end] = Clip(window.first_step, window.num_steps, max_steps);

  std::size_t width = std::to_string(std::max(0LL, step_end - 1)).size() + 2;
  for (long long r = stage_begin; r < stage_end; ++r) {
    const std::vector<Action>& actions = plan.per_stage()[r];
    for (long long k = step_begin; k < std::min<long long>(step_end, actions.size()); ++k) {
      width = std::max(width, ToString(actions[k]).size() + 2);
    }
  }
  const std::string last_label = "stage " + std::to_string(std::max(0LL, stage_end - 1));
  const std::size_t label_width = std::max<std::size_t>(last_label.size(), 4) + 1;

  std::string out;
  if (stage_begin > 0 || stage_end < num_stages || step_begin > 0 || step_end < max_steps) {
    out += "steps " + std::to_string(step_begin) + ".." + std::to_string(step_end - 1) + " of " +
           std::to_string(max_steps) + ", stages " + std::to_string(stage_begin) + ".." +
           std::to_string(stage_end - 1) + " of " + std::to_string(num_stages) + "\n";
  }
  std::string header = "step";
  header.resize(label_width, ' ');
  for (long long k = step_begin; k < step_end; ++k) {
    AppendCell(&header, std::to_string(k), false, width);
  }
  AppendLine(&out, header);
  for (long long r = stage_begin; r < stage_end; ++r) {
    const std::vector<Action>& actions = plan.per_stage()[r];
    std::string line = "stage " + std::to_string(r);
    line.resize(label_width, ' ');
    for (long long k = step_begin; k < std::min<long long>(step_end, actions.size()); ++k) {
      const bool marked = mark != nullptr && actions[k] == *mark;
      AppendCell(&line, ToString(actions[k]), marked, width);
    }
    AppendLine(&out, line);
  }
  return out;
}

GridWindow GridWindowAround(int stage, int step, int radius) {
  return GridWindow{.first_stage = std::max(0, stage - radius),
                    .num_stages = 2 * radius + 1 - std::max(0, radius - stage),
                    .first_step = std::max(0, step - radius),
                    .num_steps = 2 * radius + 1 - std::max(0, radius - step)};
}

}  // namespace stateflow::schedule
