// The text form of a Plan (PlanToText and its parser) and the per-stage grid.
#include "schedule/plan_text.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <vector>

namespace stateflow::schedule {
namespace {

constexpr const char* kHeaderForm = "'plan <policy> stages <P> microbatches <M> chunks <N>'";

struct Token {
  std::string_view text;
  std::size_t column;  // 1-based
};

// The whitespace-separated tokens of one line, with everything from '#' on
// dropped.
std::vector<Token> Tokenize(std::string_view line) {
  const std::size_t hash = line.find('#');
  if (hash != std::string_view::npos) line = line.substr(0, hash);
  std::vector<Token> tokens;
  std::size_t pos = 0;
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
  while (pos < line.size()) {
    while (pos < line.size() && is_space(line[pos])) ++pos;
    const std::size_t begin = pos;
    while (pos < line.size() && !is_space(line[pos])) ++pos;
    if (pos > begin) tokens.push_back({line.substr(begin, pos - begin), begin + 1});
  }
  return tokens;
}

bool ParseInt(std::string_view text, int* value) {
  const char* last = text.data() + text.size();
  auto [end, ec] = std::from_chars(text.data(), last, *value);
  return ec == std::errc() && end == last;
}

class PlanTextParser {
 public:
  PlanTextParser(std::string_view text, std::string_view source)
      : text_(text), source_(source) {}

  Result<Plan> Parse();

 private:
  Status Error(std::size_t column, const std::string& message) const {
    return Status::Invalid(std::string(source_) + ":" + std::to_string(line_) + ":" +
                           std::to_string(column) + ": " + message);
  }
  Status ParseHeader(const std::vector<Token>& tokens);
  Status ParseStageLine(const std::vector<Token>& tokens);
  Status ParseStageActions(const std::vector<Token>& tokens, std::size_t first, int stage);

  std::string_view text_;
  std::string_view source_;
  int line_ = 0;  // 1-based number of the line being parsed
  bool have_header_ = false;
  std::string policy_;
  int stages_ = 0;
  int microbatches_ = 0;
  int chunks_ = 0;
  int virtual_stages_ = 1;
  StagePlacement placement_ = StagePlacement::kLoop;
  std::vector<std::vector<Action>> per_stage_;  // stage lines read so far
};

Result<Plan> PlanTextParser::Parse() {
  std::size_t pos = 0;
  while (pos < text_.size()) {
    std::size_t end = text_.find('\n', pos);
    if (end == std::string_view::npos) end = text_.size();
    ++line_;
    const std::vector<Token> tokens = Tokenize(text_.substr(pos, end - pos));
    pos = end + 1;
    if (tokens.empty()) continue;
    SF_RETURN_IF_ERROR(have_header_ ? ParseStageLine(tokens) : ParseHeader(tokens));
  }
  ++line_;  // errors about a missing line point just past the end
  if (!have_header_) return Error(1, "empty plan: expected the header " + std::string(kHeaderForm));
  if (static_cast<int>(per_stage_.size()) != stages_) {
    return Error(1, "expected " + std::to_string(stages_) + " stage lines (header says stages " +
                        std::to_string(stages_) + "), found " +
                        std::to_string(per_stage_.size()));
  }
  return Plan(policy_, stages_, microbatches_, chunks_, std::move(per_stage_), virtual_stages_,
              placement_);
}

Status PlanTextParser::ParseHeader(const std::vector<Token>& tokens) {
  if (tokens[0].text != "plan") {
    return Error(tokens[0].column, "expected the header " + std::string(kHeaderForm) + ", got '" +
                                       std::string(tokens[0].text) + "'");
  }
  if (tokens.size() < 2) return Error(tokens[0].column + 4, "expected a policy name after 'plan'");
  policy_ = std::string(tokens[1].text);
  const std::pair<const char*, int*> fields[] = {
      {"stages", &stages_}, {"microbatches", &microbatches_}, {"chunks", &chunks_}};
  std::size_t t = 2;
  for (const auto& [name, value] : fields) {
    if (t >= tokens.size()) {
      const Token& last = tokens.back();
      return Error(last.column + last.text.size(), std::string("header ends early: expected '") +
                                                       name + " <count>'");
    }
    if (tokens[t].text != name) {
      return Error(tokens[t].column, std::string("expected '") + name + "', got '" +
                                         std::string(tokens[t].text) + "'");
    }
    if (t + 1 >= tokens.size() || !ParseInt(tokens[t + 1].text, value) || *value < 1) {
      const std::size_t column = t + 1 < tokens.size()
                                     ? tokens[t + 1].column
                                     : tokens[t].column + tokens[t].text.size();
      return Error(column, std::string(name) + " must be an integer >= 1");
    }
    t += 2;
  }
  // Optional: "virtual_stages <v> placement <loop|v>" (virtual stages).
  if (t < tokens.size() && tokens[t].text == "virtual_stages") {
    if (t + 1 >= tokens.size() || !ParseInt(tokens[t + 1].text, &virtual_stages_) ||
        virtual_stages_ < 1) {
      const std::size_t column = t + 1 < tokens.size()
                                     ? tokens[t + 1].column
                                     : tokens[t].column + tokens[t].text.size();
      return Error(column, "virtual_stages must be an integer >= 1");
    }
    t += 2;
    if (t < tokens.size() && tokens[t].text == "placement") {
      const std::optional<StagePlacement> placement =
          t + 1 < tokens.size() ? ParseStagePlacement(tokens[t + 1].text) : std::nullopt;
      if (!placement) {
        const std::size_t column = t + 1 < tokens.size()
                                       ? tokens[t + 1].column
                                       : tokens[t].column + tokens[t].text.size();
        return Error(column, "placement must be loop or v");
      }
      placement_ = *placement;
      t += 2;
    }
    if (placement_ == StagePlacement::kVShape && virtual_stages_ != 2) {
      return Error(tokens[t - 1].column, "placement v needs virtual_stages 2");
    }
  }
  if (t < tokens.size()) {
    return Error(tokens[t].column, "unexpected '" + std::string(tokens[t].text) +
                                       "' after the header");
  }
  if (static_cast<long long>(microbatches_) * chunks_ * virtual_stages_ > kMaxUnitsPerStage) {
    return Error(tokens[4].column, std::string(virtual_stages_ == 1
                                                   ? "microbatches * chunks"
                                                   : "microbatches * chunks * virtual_stages") +
                                       " exceeds the limit " +
                                       std::to_string(kMaxUnitsPerStage));
  }
  have_header_ = true;
  return Status::Ok();
}

// "stage <r>: <actions...>" (the colon may also stand apart).
Status PlanTextParser::ParseStageLine(const std::vector<Token>& tokens) {
  const int expected = static_cast<int>(per_stage_.size());
  if (tokens[0].text != "stage") {
    return Error(tokens[0].column, "expected 'stage " + std::to_string(expected) + ":', got '" +
                                       std::string(tokens[0].text) + "'");
  }
  std::string_view number = tokens.size() > 1 ? tokens[1].text : std::string_view();
  std::size_t first_action = 2;
  if (!number.empty() && number.back() == ':') {
    number.remove_suffix(1);
  } else if (tokens.size() > 2 && tokens[2].text == ":") {
    first_action = 3;
  } else {
    const std::size_t column = tokens.size() > 1 ? tokens[1].column : tokens[0].column + 5;
    return Error(column, "expected 'stage <r>:' with a colon after the stage number");
  }
  int stage = -1;
  if (!ParseInt(number, &stage) || stage < 0) {
    return Error(tokens[1].column, "stage number must be an integer >= 0, got '" +
                                       std::string(number) + "'");
  }
  if (stage >= stages_) {
    return Error(tokens[1].column, "stage " + std::to_string(stage) +
                                       " out of range: header says stages " +
                                       std::to_string(stages_));
  }
  if (stage != expected) {
    return Error(tokens[1].column, "expected stage " + std::to_string(expected) + ", got stage " +
                                       std::to_string(stage) + " (stage lines list stages 0.." +
                                       std::to_string(stages_ - 1) + " in order, once each)");
  }
  return ParseStageActions(tokens, first_action, stage);
}

Status PlanTextParser::ParseStageActions(const std::vector<Token>& tokens, std::size_t first,
                                         int stage) {
  std::vector<Action> actions;
  actions.reserve(tokens.size() - first);
  for (std::size_t t = first; t < tokens.size(); ++t) {
    Result<Action> action = ParseAction(tokens[t].text);
    if (!action.ok()) return Error(tokens[t].column, action.status().message());
    const Action& x = *action;
    std::string problem;
    const Plan shape("", stages_, 1, 1, {}, virtual_stages_, placement_);
    if (virtual_stages_ == 1 && x.stage != stage) {
      problem = "names stage " + std::to_string(x.stage) + " on the line of stage " +
                std::to_string(stage);
    } else if (x.stage >= shape.model_stages()) {
      problem = "names model stage " + std::to_string(x.stage) + " but the header has " +
                std::to_string(shape.model_stages()) + " (stages x virtual_stages)";
    } else if (shape.RankOf(x.stage) != stage) {
      problem = "names model stage " + std::to_string(x.stage) + ", which placement " +
                std::string(StagePlacementName(placement_)) + " puts on stage " +
                std::to_string(shape.RankOf(x.stage)) + ", on the line of stage " +
                std::to_string(stage);
    } else if (x.microbatch >= microbatches_) {
      problem = "has microbatch " + std::to_string(x.microbatch) +
                " but the header says microbatches " + std::to_string(microbatches_);
    } else if (x.chunk >= chunks_) {
      problem = "has chunk " + std::to_string(x.chunk) + " but the header says chunks " +
                std::to_string(chunks_);
    }
    if (!problem.empty()) {
      return Error(tokens[t].column, "action " + std::string(tokens[t].text) + " " + problem);
    }
    actions.push_back(x);
  }
  per_stage_.push_back(std::move(actions));
  return Status::Ok();
}

void AppendNumber(std::string* out, int value) {
  char buffer[16];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  (void)ec;
  out->append(buffer, end);
}

}  // namespace

std::string PlanToText(const Plan& plan) {
  std::string out = "plan " + plan.policy() + " stages " + std::to_string(plan.stages()) +
                    " microbatches " + std::to_string(plan.microbatches()) + " chunks " +
                    std::to_string(plan.chunks());
  if (plan.virtual_stages() != 1) {
    out += " virtual_stages " + std::to_string(plan.virtual_stages()) + " placement " +
           std::string(StagePlacementName(plan.placement()));
  }
  out += '\n';
  out.reserve(out.size() + 12 * plan.num_actions() + 16 * plan.per_stage().size());
  for (std::size_t r = 0; r < plan.per_stage().size(); ++r) {
    out += "stage ";
    out += std::to_string(r);
    out += ':';
    for (const Action& x : plan.per_stage()[r]) {
      out += ' ';
      AppendNumber(&out, x.stage);
      out += PassLetter(x.pass);
      AppendNumber(&out, x.microbatch);
      out += '.';
      AppendNumber(&out, x.chunk);
    }
    out += '\n';
  }
  return out;
}

Result<Plan> ParsePlanText(std::string_view text, std::string_view source_name) {
  return PlanTextParser(text, source_name).Parse();
}

// ---- the grid ----------------------------------------------------------------

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
