#include "tools/sweep_format.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include <google/protobuf/util/json_util.h>

#include "common/files.h"
#include "schedule/policies.h"
#include "sim/search.h"
#include "tools/report_format.h"

namespace stateflow::tools {
namespace {

using Rows = std::vector<std::vector<std::string>>;

constexpr double kGib = 1024.0 * 1024.0 * 1024.0;

std::string SweepPrintf(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

// Columns as wide as their widest cell plus two spaces; no trailing blanks.
std::string Align(const Rows& rows, const std::string& indent = "") {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    if (row.size() > width.size()) width.resize(row.size(), 0);
    for (std::size_t k = 0; k < row.size(); ++k) width[k] = std::max(width[k], row[k].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (std::size_t k = 0; k < row.size(); ++k) {
      line += row[k];
      if (k + 1 < row.size()) line.append(width[k] + 2 - row[k].size(), ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string Throughput(double tokens_per_s, const std::string& unit) {
  if (unit == "units") return SweepPrintf("%.4g tok/unit", tokens_per_s);
  return SweepPrintf("%.2f K tok/s", tokens_per_s / 1e3);
}

std::string PeakWhere(const pb::SweepRun& run) {
  return FormatBytes(run.peak_memory_bytes()) + " (stage " + std::to_string(run.peak_stage()) +
         ", " + run.peak_class() + ")";
}

// True if the runs differ in their state-transition settings (the sweep had
// more than one st_overlap or st_tile): only then do the tables name them.
bool StSwept(const pb::SweepReport& r) {
  for (const pb::SweepRun& run : r.runs()) {
    if (run.st_overlap() != r.runs(0).st_overlap() || run.st_tile() != r.runs(0).st_tile()) {
      return true;
    }
  }
  return false;
}

// "overlap on, B_V 32".
std::string StLabel(const pb::SweepRun& run) {
  return std::string("overlap ") + (run.st_overlap() ? "on" : "off") + ", B_V " +
         std::to_string(run.st_tile());
}

// True if a run has virtual stages (v > 1): only then do the tables name v.
bool VSwept(const pb::SweepReport& r) {
  for (const pb::SweepRun& run : r.runs()) {
    if (run.virtual_stages() > 1) return true;
  }
  return false;
}

// "N=4 alpha=0.5", with " v=2" for a run with virtual stages and
// " ST overlap on B_V=32" when `st`.
std::string NAlpha(const pb::SweepRun& run, bool st) {
  return "N=" + std::to_string(run.chunks()) + " alpha=" + SweepPrintf("%g", run.alpha()) +
         (run.virtual_stages() > 1 ? " v=" + std::to_string(run.virtual_stages()) : "") +
         (st ? std::string(" ST overlap ") + (run.st_overlap() ? "on" : "off") +
                   " B_V=" + std::to_string(run.st_tile())
             : "");
}

std::string CellLabel(const pb::SweepCell& cell) {
  return "T=" + TokensLabel(cell.seq_len()) + " GBS=" + std::to_string(cell.global_batch());
}

// CSV field: quoted if it holds a comma, quote or newline.
std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += (c == '"') ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// ", systems: 1f1b in megatron-core, stateflow in megatron-core": the system
// each policy's runs ran in, in order of first appearance.
std::string SweepSystems(const pb::SweepReport& r) {
  std::vector<std::string> seen;
  std::string out;
  for (const pb::SweepRun& run : r.runs()) {
    if (std::find(seen.begin(), seen.end(), run.policy()) != seen.end()) continue;
    seen.push_back(run.policy());
    out += (out.empty() ? ", systems: " : ", ") + run.policy() + " in " +
           (run.system().empty() ? std::string("stateflow") : run.system());
  }
  return out;
}

std::string SweepHeader(const pb::SweepReport& r) {
  std::string out = "sweep " + r.scenario() + ": model " + r.model() + ", P=" +
                    std::to_string(r.pipeline_size()) + " TP=" +
                    std::to_string(r.tensor_size()) + " DP=" + std::to_string(r.data_size()) +
                    (r.context_size() > 1 ? " CP=" + std::to_string(r.context_size())
                                          : std::string()) +
                    ", microbatch size " + std::to_string(r.microbatch_size()) +
                    ", capacity " + FormatBytes(r.capacity_bytes()) + " (" +
                    FormatBytes(r.usable_bytes()) + " usable), cost model " + r.cost_model() +
                    SweepSystems(r) + "\n";
  const int reused = r.runs_size() - static_cast<int>(r.num_simulated());
  out += std::to_string(r.runs_size()) + " configurations in " + SweepPrintf("%.3f s", r.elapsed_s());
  if (reused > 0) {
    out += " (" + std::to_string(reused) +
           " reused the result of another alpha that rounds to the same chunks)";
  }
  out += "\n";
  for (const std::string& note : r.notes()) out += "note: " + note + "\n";
  return out;
}

// Rows: policy; columns: (seq_len, global batch), both in order of first
// appearance.
std::string ResultsTable(const pb::SweepReport& r) {
  std::vector<std::pair<double, std::uint32_t>> columns;
  std::vector<std::string> policies;
  std::map<std::tuple<std::string, double, std::uint32_t>, const pb::SweepCell*> cells;
  for (const pb::SweepCell& c : r.cells()) {
    const std::pair<double, std::uint32_t> col{c.seq_len(), c.global_batch()};
    if (std::find(columns.begin(), columns.end(), col) == columns.end()) columns.push_back(col);
    if (std::find(policies.begin(), policies.end(), c.policy()) == policies.end()) {
      policies.push_back(c.policy());
    }
    cells[{c.policy(), c.seq_len(), c.global_batch()}] = &c;
  }
  auto best_of = [&](const std::string& policy, const auto& col) -> const pb::SweepRun* {
    auto it = cells.find({policy, col.first, col.second});
    if (it == cells.end() || it->second->best_run() < 0) return nullptr;
    return &r.runs(it->second->best_run());
  };
  const bool st = StSwept(r);
  Rows rows;
  rows.push_back({"policy"});
  for (const auto& col : columns) {
    rows[0].push_back("T=" + TokensLabel(col.first) + " GBS=" + std::to_string(col.second));
  }
  for (const std::string& policy : policies) {
    std::vector<std::string> row = {policy},
                             chosen = {std::string(VSwept(r) ? "  best N, alpha, v"
                                                             : "  best N, alpha") +
                                       (st ? "; ST" : "")},
                             speedup = {"  speed-up vs " + policies[0]};
    for (const auto& col : columns) {
      const pb::SweepRun* run = best_of(policy, col);
      const pb::SweepRun* base = best_of(policies[0], col);
      row.push_back(run == nullptr ? (cells.count({policy, col.first, col.second}) ? "OOM" : "-")
                                   : SweepPrintf("%.1f", run->tokens_per_s() / 1e3) + " / " +
                                         SweepPrintf("%.1f", run->peak_memory_bytes() / kGib));
      chosen.push_back(run == nullptr ? "-"
                                      : std::to_string(run->chunks()) + ", " +
                                            SweepPrintf("%g", run->alpha()) +
                                            (VSwept(r) ? ", " + std::to_string(std::max(
                                                                    1u, run->virtual_stages()))
                                                       : "") +
                                            (st ? "; " + StLabel(*run) : ""));
      speedup.push_back(run == nullptr || base == nullptr
                            ? "-"
                            : SweepPrintf("%.2fx", run->tokens_per_s() / base->tokens_per_s()));
    }
    rows.push_back(row);
    if (policy != "1f1b") rows.push_back(chosen);
    if (policy != policies[0]) rows.push_back(speedup);
  }
  if (policies.size() > 1) {  // the fastest feasible schedule of each column
    std::vector<std::string> row = {"best schedule"};
    for (const auto& col : columns) {
      const pb::SweepRun* top = nullptr;
      for (const std::string& policy : policies) {
        const pb::SweepRun* run = best_of(policy, col);
        if (run != nullptr && (top == nullptr || sim::BetterRun(*run, *top))) top = run;
      }
      row.push_back(top == nullptr ? "-"
                                   : top->policy() + (top->virtual_stages() > 1 && schedule::VirtualStagesFree(top->policy())
                                                          ? " v=" + std::to_string(top->virtual_stages())
                                                          : ""));
    }
    rows.push_back(row);
  }
  const std::string unit = r.time_unit() == "units" ? "tokens/unit / 1e3" : "K tokens/s";
  return "cells: throughput (" + unit +
         ") / peak memory (GiB) of the best feasible configuration, or OOM if none fits\n\n" +
         Align(rows);
}

std::string BestList(const pb::SweepReport& r) {
  const bool st = StSwept(r);
  Rows rows;
  for (const pb::SweepCell& c : r.cells()) {
    std::vector<std::string> row = {c.policy(), CellLabel(c)};
    if (c.best_run() >= 0) {
      const pb::SweepRun& run = r.runs(c.best_run());
      row.insert(row.end(), {NAlpha(run, st), "step " + FormatTime(run.step_time_s(), r.time_unit()),
                             Throughput(run.tokens_per_s(), r.time_unit()),
                             SweepPrintf("bubble %.1f %%", 100.0 * run.bubble_fraction()),
                             "peak " + PeakWhere(run)});
    } else {
      const pb::SweepRun* least = nullptr;
      for (std::uint32_t i = c.first_run(); i < c.first_run() + c.num_runs(); ++i) {
        const pb::SweepRun& run = r.runs(static_cast<int>(i));
        if (least == nullptr || run.peak_memory_bytes() < least->peak_memory_bytes()) {
          least = &run;
        }
      }
      row.insert(row.end(), {"OOM (all " + std::to_string(c.num_runs()) + ")", "", "", ""});
      if (least != nullptr) {
        row.push_back("smallest peak " + PeakWhere(*least) + " at " + NAlpha(*least, st));
      }
    }
    rows.push_back(row);
  }
  return "best feasible configuration per cell:\n" + Align(rows, "  ");
}

std::string SplitLabel(const pb::PlanCandidate& c) {
  return std::to_string(c.pipeline_size()) + " x " + std::to_string(c.tensor_size()) + " x " +
         std::to_string(c.data_size()) +
         (c.context_size() > 1 ? ", CP " + std::to_string(c.context_size()) : std::string());
}

}  // namespace

const char kSweepCsvHeader[] =
    "scenario,model,policy,seq_len,global_batch,microbatches,pipeline_size,tensor_size,"
    "data_size,chunks,alpha,recompute,step_time_s,tokens_per_s,bubble_fraction,"
    "peak_memory_bytes,capacity_bytes,oom,peak_stage,peak_class,best,system,usable_bytes,"
    "st_overlap,st_tile,virtual_stages";

std::string TokensLabel(double tokens) {
  const auto t = static_cast<long long>(tokens);
  if (t >= (1LL << 20) && t % (1LL << 20) == 0) return std::to_string(t >> 20) + "M";
  if (t >= 1024 && t % 1024 == 0) return std::to_string(t >> 10) + "K";
  return std::to_string(t);
}

std::string SweepCsv(const pb::SweepReport& r) {
  std::string out = std::string(kSweepCsvHeader) + "\n";
  for (const pb::SweepRun& run : r.runs()) {
    const std::vector<std::string> fields = {
        CsvField(r.scenario()), CsvField(r.model()), CsvField(run.policy()),
        SweepPrintf("%.0f", run.seq_len()), std::to_string(run.global_batch()),
        std::to_string(run.microbatches()), std::to_string(r.pipeline_size()),
        std::to_string(r.tensor_size()), std::to_string(r.data_size()),
        std::to_string(run.chunks()), SweepPrintf("%.17g", run.alpha()), CsvField(run.recompute()),
        SweepPrintf("%.17g", run.step_time_s()), SweepPrintf("%.17g", run.tokens_per_s()),
        SweepPrintf("%.17g", run.bubble_fraction()), SweepPrintf("%.0f", run.peak_memory_bytes()),
        SweepPrintf("%.0f", r.capacity_bytes()), run.oom() ? "1" : "0",
        std::to_string(run.peak_stage()), CsvField(run.peak_class()), run.best() ? "1" : "0",
        CsvField(run.system()), SweepPrintf("%.0f", r.usable_bytes()), run.st_overlap() ? "1" : "0",
        std::to_string(run.st_tile()), std::to_string(std::max(1u, run.virtual_stages()))};
    for (std::size_t k = 0; k < fields.size(); ++k) out += (k ? "," : "") + fields[k];
    out += "\n";
  }
  return out;
}

namespace {

// The records of a CSV text (RFC 4180: fields quoted with ", "" inside
// quotes, a quoted field may hold commas and newlines), or nullopt if a
// quote is left open or stray.
std::optional<std::vector<std::vector<std::string>>> CsvRecords(std::string_view text) {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> record;
  std::string field;
  bool quoted = false, was_quoted = false;
  for (std::size_t k = 0; k < text.size(); ++k) {
    const char c = text[k];
    if (quoted) {
      if (c != '"') {
        field += c;
      } else if (k + 1 < text.size() && text[k + 1] == '"') {
        field += '"';
        ++k;
      } else {
        quoted = false;
      }
    } else if (c == '"') {
      if (!field.empty() || was_quoted) return std::nullopt;  // a quote inside a field
      quoted = was_quoted = true;
    } else if (c == ',' || c == '\n') {
      record.push_back(std::move(field));
      field.clear();
      was_quoted = false;
      if (c == '\n') records.push_back(std::move(record)), record.clear();
    } else {
      if (was_quoted) return std::nullopt;  // text after a closing quote
      field += c;
    }
  }
  if (quoted) return std::nullopt;
  if (!field.empty() || !record.empty()) record.push_back(std::move(field)), records.push_back(std::move(record));
  return records;
}

}  // namespace

Status WriteSweepCsv(const pb::SweepReport& report, const std::string& path) {
  const std::string text = SweepCsv(report);
  // Read back before it is written (issue 31: written files mean what they
  // say): a header and one record per run, each as wide as the header, the
  // echoed names (scenario, model, policy) as they are.
  const auto records = CsvRecords(text);
  bool same = records.has_value() && records->size() == 1 + static_cast<std::size_t>(report.runs_size());
  for (std::size_t r = 0; same && r < records->size(); ++r) {
    same = (*records)[r].size() == (*records)[0].size();
    if (same && r > 0) {
      same = (*records)[r][0] == report.scenario() && (*records)[r][1] == report.model() &&
             (*records)[r][2] == report.runs(static_cast<int>(r - 1)).policy();
    }
  }
  if (!same) return Status::Internal(path + ": the CSV does not read back as the sweep's runs");
  return WriteFile(path, text);
}

std::string FormatSweepTable(const pb::SweepReport& r) {
  return SweepHeader(r) + "\n" + ResultsTable(r) + "\n" + BestList(r);
}

std::string FormatPlanTable(const pb::CapacityPlanReport& r, int top) {
  int feasible = 0, oom = 0, illegal = 0;
  for (const pb::PlanCandidate& c : r.candidates()) {
    feasible += c.verdict() == "feasible";
    oom += c.verdict() == "oom";
    illegal += c.verdict() == "illegal";
  }
  std::string out = "plan: " + r.model() + " at T=" + TokensLabel(r.seq_len()) +
                    ", global batch " + std::to_string(r.global_batch()) + ", on " +
                    std::to_string(r.devices()) + " devices of " + r.cluster() + " (" +
                    std::to_string(r.devices_per_node()) + " per node, " +
                    FormatBytes(r.capacity_bytes()) + " each)\n";
  bool cp = false;
  for (const pb::PlanCandidate& c : r.candidates()) cp = cp || c.context_size() > 1;
  out += std::to_string(r.candidates_size()) + " splits P x TP x DP" +
         (cp ? " (and CP: devices = P x TP x CP x DP)" : "") + ": " +
         std::to_string(feasible) + " feasible, " + std::to_string(oom) + " OOM, " +
         std::to_string(illegal) + " illegal; " + std::to_string(r.num_simulated()) +
         " configurations simulated in " + SweepPrintf("%.3f s", r.elapsed_s()) + "\n";
  for (const std::string& note : r.notes()) out += "note: " + note + "\n";

  Rows ranked = {{"rank", "P x TP x DP", "M", "policy", "N", "alpha", "throughput", "step time",
                  "bubble", "peak memory"}};
  for (const pb::PlanCandidate& c : r.candidates()) {
    if (c.verdict() != "feasible" || (top > 0 && static_cast<int>(c.rank()) > top)) continue;
    const pb::SweepRun& b = c.best();
    ranked.push_back({std::to_string(c.rank()), SplitLabel(c), std::to_string(c.microbatches()),
                      b.policy() + (b.virtual_stages() > 1 ? " v=" + std::to_string(b.virtual_stages())
                                                           : std::string()),
                      std::to_string(b.chunks()), SweepPrintf("%g", b.alpha()),
                      Throughput(b.tokens_per_s(), "s"), FormatTime(b.step_time_s(), "s"),
                      SweepPrintf("%.1f %%", 100.0 * b.bubble_fraction()), PeakWhere(b)});
  }
  out += "\nfeasible, fastest first";
  out += (top > 0 && feasible > top) ? " (top " + std::to_string(top) + " of " +
                                           std::to_string(feasible) + "):\n"
                                     : ":\n";
  out += feasible == 0 ? "  none: no split fits in memory\n" : Align(ranked, "  ");

  Rows rejected = {{"P x TP x DP", "verdict", "why"}};
  for (const pb::PlanCandidate& c : r.candidates()) {
    if (c.verdict() == "feasible") continue;
    rejected.push_back({SplitLabel(c), c.verdict(), c.reason()});
  }
  if (rejected.size() > 1) out += "\nrejected:\n" + Align(rejected, "  ");
  return out;
}

}  // namespace stateflow::tools
