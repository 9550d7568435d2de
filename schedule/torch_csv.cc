// torch.distributed.pipelining's schedule CSV (torch_csv.h).
#include "schedule/torch_csv.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <vector>

#include "schedule/policies.h"

namespace stateflow::schedule {
namespace {

// The cell's number, or nullopt when `s` is empty, not all digits or above
// `limit`.
std::optional<std::int64_t> Number(std::string_view s, std::int64_t limit) {
  if (s.empty() || s.size() > 12) return std::nullopt;
  std::int64_t v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v > limit) return std::nullopt;
  return v;
}

// `s` with every byte outside printable ASCII shown as '?', for messages.
std::string Shown(std::string_view s) {
  std::string out(s.substr(0, 40));
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return s.size() > 40 ? out + "..." : out;
}

std::string_view Strip(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

struct TorchAction {
  std::int64_t stage = 0;
  std::string type;  // F, I, B, W, or a communication / sharding action
  std::optional<std::int64_t> microbatch;
};

// torch's _Action grammar: <stage><type><microbatch?>.
std::optional<TorchAction> ParseCell(std::string_view cell) {
  std::size_t k = 0;
  while (k < cell.size() && std::isdigit(static_cast<unsigned char>(cell[k]))) ++k;
  const std::optional<std::int64_t> stage = Number(cell.substr(0, k), 1 << 20);
  if (!stage) return std::nullopt;
  static constexpr std::string_view kTypes[] = {"UNSHARD", "RESHARD", "SEND_F", "RECV_F",
                                                "SEND_B",  "RECV_B",  "F",      "I",
                                                "B",       "W"};
  for (std::string_view type : kTypes) {
    if (cell.substr(k, type.size()) != type) continue;
    TorchAction a{.stage = *stage, .type = std::string(type), .microbatch = std::nullopt};
    const std::string_view rest = cell.substr(k + type.size());
    if (!rest.empty()) {
      a.microbatch = Number(rest, kMaxUnitsPerStage - 1);
      if (!a.microbatch) return std::nullopt;
    }
    return a;
  }
  return std::nullopt;
}

// A compute cell: its row (rank), the model stage it names, where it is.
struct Cell {
  int row = 0;
  int stage = 0;
  std::string where;  // "<source>:<row>:<cell>"
  std::string text;
};

struct Placement {
  int virtual_stages = 1;
  StagePlacement placement = StagePlacement::kLoop;
};

// The placement the cells' stages imply (torch's multi-stage schedules: a
// rank holds several model stages). With P rows and S = the highest stage
// named + 1 model stages, v = S / P, and either stage s is on rank s mod P
// (a loop: torch's interleaved schedules) or, at v = 2, stages r and
// 2P - 1 - r are on rank r (a V: torch's ZBV and DualPipeV). A loop is taken
// where both fit (P = 1). Errors name the first cell that fits neither.
Result<Placement> PlacementOf(const std::vector<Cell>& cells, int P) {
  int highest = 0;
  const Cell* top = nullptr;
  for (const Cell& c : cells) {
    if (top == nullptr || c.stage > highest) {
      highest = c.stage;
      top = &c;
    }
  }
  const int S = std::max(highest + 1, P);  // a rank may hold no action at all
  if (S % P != 0) {
    return Status::Invalid(top->where + ": action " + top->text + " names stage " +
                           std::to_string(highest) + ", so the plan has " + std::to_string(S) +
                           " model stages: not the same number on each of its " +
                           std::to_string(P) + " ranks (rows)");
  }
  const int v = S / P;
  const Cell* off_loop = nullptr;
  const Cell* off_v = nullptr;
  for (const Cell& c : cells) {
    if (off_loop == nullptr && c.stage % P != c.row) off_loop = &c;
    if (off_v == nullptr && (c.stage < P ? c.stage : 2 * P - 1 - c.stage) != c.row) off_v = &c;
  }
  if (off_loop == nullptr) return Placement{.virtual_stages = v, .placement = StagePlacement::kLoop};
  if (v == 2 && off_v == nullptr) {
    return Placement{.virtual_stages = 2, .placement = StagePlacement::kVShape};
  }
  // Report the first cell off the placement the cells before it fit.
  const Cell& bad = v == 2 && off_v > off_loop ? *off_v : *off_loop;
  std::string rule = "with " + std::to_string(P) + " ranks and " + std::to_string(S) +
                     " model stages, stage s runs on rank s mod " + std::to_string(P);
  if (v == 2) {
    rule += " (a loop) or, in a V, stages r and " + std::to_string(2 * P - 1) + " - r on rank r";
  }
  return Status::Invalid(bad.where + ": action " + bad.text + " is on stage " +
                         std::to_string(bad.stage) + " but its row is rank " +
                         std::to_string(bad.row) + ": " + rule);
}

}  // namespace

std::string PlanToTorchCsv(const Plan& plan) {
  bool split = false;
  for (const auto& list : plan.per_stage()) {
    for (const Action& a : list) split = split || a.pass == Pass::kWeight;
  }
  std::string out;
  for (int r = 0; r < plan.stages(); ++r) {
    bool first = true;
    for (const Action& a : plan.stage(r)) {
      if (!first) out += ',';
      first = false;
      out += std::to_string(a.stage);
      out += a.pass == Pass::kForward ? 'F' : a.pass == Pass::kWeight ? 'W' : split ? 'I' : 'B';
      out += std::to_string(static_cast<std::int64_t>(a.microbatch) * plan.chunks() + a.chunk);
    }
    out += '\n';
  }
  return out;
}

Result<Plan> ParseTorchCsv(std::string_view text, std::string_view source, int chunks,
                           std::string_view policy) {
  const std::string src(source);
  if (chunks < 1) return Status::Invalid(src + ": chunks must be >= 1, got " + std::to_string(chunks));
  std::vector<std::string_view> lines;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = std::min(text.find('\n', at), text.size());
    lines.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  while (!lines.empty() && Strip(lines.back()).empty()) lines.pop_back();  // trailing blank lines
  if (lines.empty()) return Status::Invalid(src + ": no rows (one row of actions per rank)");
  std::vector<std::vector<Action>> per_stage(lines.size());
  std::int64_t units = 0;
  std::string b_at, i_at;  // where a backward written B and one written I first appear
  std::vector<Cell> cells;        // every compute cell, for the placement
  for (std::size_t row = 0; row < lines.size(); ++row) {
    std::size_t column = 0;
    for (std::size_t at = 0; at <= lines[row].size(); ++column) {
      const std::size_t comma = std::min(lines[row].find(',', at), lines[row].size());
      const std::string_view cell = Strip(lines[row].substr(at, comma - at));
      at = comma + 1;
      const std::string where = src + ":" + std::to_string(row + 1) + ":" + std::to_string(column + 1);
      if (cell.empty() || cell == "None") continue;  // the rank idles this step
      const std::optional<TorchAction> a = ParseCell(cell);
      if (!a) {
        return Status::Invalid(where + ": '" + Shown(cell) +
                               "' is not a torch action (<stage><F|I|B|W><microbatch>, e.g. 0F3)");
      }
      if (a->type.size() > 1) continue;  // communication and sharding: implied by our plans
      if (!a->microbatch) {
        return Status::Invalid(where + ": action " + std::string(cell) + " names no microbatch");
      }
      const char type = a->type[0];
      if (type == 'B' && b_at.empty()) b_at = where;
      if (type == 'I' && i_at.empty()) i_at = where;
      if (!b_at.empty() && !i_at.empty()) {
        return Status::Invalid(src + ": mixes backwards written B (first at " + b_at +
                               ") with backwards written I (first at " + i_at +
                               "): a plan splits every backward or none");
      }
      const std::int64_t m = *a->microbatch;
      units = std::max(units, m + 1);
      cells.push_back({static_cast<int>(row), static_cast<int>(a->stage), where, std::string(cell)});
      per_stage[row].push_back(Action{
          .stage = static_cast<int>(a->stage),
          .pass = type == 'F' ? Pass::kForward : type == 'W' ? Pass::kWeight : Pass::kBackward,
          .microbatch = static_cast<int>(m / chunks),
          .chunk = static_cast<int>(m % chunks)});
    }
  }
  if (units == 0) return Status::Invalid(src + ": no compute actions (F, I, B, W)");
  if (units % chunks != 0) {
    return Status::Invalid(src + ": " + std::to_string(units) + " torch microbatches are not " +
                           std::to_string(chunks) + " chunks each of whole microbatches");
  }
  const int M = static_cast<int>(units / chunks);
  SF_RETURN_IF_ERROR(CheckPlanDimensions(static_cast<int>(per_stage.size()), M, chunks));
  const std::string name(policy);
  if (name.empty() || name.find_first_of(" \t\r\n#") != std::string::npos) {
    return Status::Invalid("policy name '" + name + "' must be one token");
  }
  const int P = static_cast<int>(per_stage.size());
  SF_ASSIGN_OR_RETURN(const Placement placement, PlacementOf(cells, P));
  if (static_cast<long long>(M) * chunks * placement.virtual_stages > kMaxUnitsPerStage) {
    return Status::Invalid(src + ": " + std::to_string(placement.virtual_stages) +
                           " model stages per rank of " + std::to_string(units) +
                           " units each are too many for one rank");
  }
  return Plan(name, P, M, chunks, std::move(per_stage), placement.virtual_stages,
              placement.placement);
}

bool LooksLikeTorchCsv(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = std::min(text.find('\n', at), text.size());
    const std::string_view line = Strip(text.substr(at, nl - at));
    at = nl + 1;
    if (line.empty() || line.front() == '#') continue;
    return std::isdigit(static_cast<unsigned char>(line.front())) || line.front() == ',';
  }
  return false;
}

}  // namespace stateflow::schedule
