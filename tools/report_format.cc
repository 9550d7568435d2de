#include "tools/report_format.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <algorithm>
#include <utility>
#include <vector>

#include <google/protobuf/util/json_util.h>

#include "sf_git_commit.h"  // SF_GIT_COMMIT, stamped at build time (cmake/GitCommit.cmake)
#ifndef SF_VERSION
#define SF_VERSION ""
#endif

namespace stateflow::tools {

std::string StageLayersText(const pb::StageReport& s) {
  std::string layers = std::to_string(s.first_layer()) + "-" + std::to_string(s.last_layer() - 1);
  if (s.model_stages_size() > 0) {
    layers.clear();
    for (const pb::LayerRange& m : s.model_stages()) {
      if (!layers.empty()) layers += ',';
      layers += std::to_string(m.first_layer());
      layers += '-';
      layers += std::to_string(m.last_layer() - 1);
    }
  }
  return layers;
}

namespace {

std::string Printf(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

std::string Pad(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

// Aligns cells into columns as wide as their widest cell (+2 spaces).
std::string AlignTable(const std::vector<std::vector<std::string>>& rows,
                       const std::string& indent = "") {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    if (row.size() > width.size()) width.resize(row.size(), 0);
    for (std::size_t k = 0; k < row.size(); ++k) width[k] = std::max(width[k], row[k].size() + 2);
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (std::size_t k = 0; k < row.size(); ++k) {
      line += (k + 1 == row.size()) ? row[k] : Pad(row[k], width[k]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string ScheduleLabel(const pb::Report& r) {
  if (r.policy() == "1f1b") return r.policy();  // whole sequences
  const int v = r.stages_size() > 0 ? r.stages(0).model_stages_size() : 0;
  return r.policy() + " N=" + std::to_string(r.chunks()) +
         (v > 1 ? " v=" + std::to_string(v) : "") +
         (r.alpha() != 0 ? Printf(" a=%.2f", r.alpha()) : "");
}

std::string PeakWhere(const pb::Report& r) {
  for (const auto& s : r.stages()) {
    if (s.peak_memory_bytes() == r.peak_memory_bytes()) {
      return FormatBytes(r.peak_memory_bytes()) + " (stage " + std::to_string(s.stage()) +
             ", " + s.peak_dominant_class() + ")";
    }
  }
  return FormatBytes(r.peak_memory_bytes());
}

std::string Throughput(const pb::Report& r) {
  const double t = r.tokens_per_s();
  if (r.time_unit() == "units") return Printf("%.4g tok/unit", t);
  if (t >= 1e6) return Printf("%.3f M tok/s", t / 1e6);
  if (t >= 1e3) return Printf("%.2f K tok/s", t / 1e3);
  return Printf("%.1f tok/s", t);
}

std::string StageTable(const pb::Report& r) {
  std::vector<std::vector<std::string>> rows = {
      {"stage", "layers", "busy", "bubble", "peak memory", "largest at peak", ""}};
  for (const auto& s : r.stages()) {
    rows.push_back({std::to_string(s.stage()), StageLayersText(s),
                    FormatTime(s.busy_s(), r.time_unit()),
                    Printf("%.1f %%", 100.0 * s.bubble_fraction()),
                    FormatBytes(s.peak_memory_bytes()), s.peak_dominant_class(),
                    s.oom() ? "OOM" : ""});
  }
  return "per stage, " + ScheduleLabel(r) + ":\n" + AlignTable(rows, "  ");
}

// A term's cell: "-" for none, so that the terms a pass has stand out.
std::string TermTime(double seconds, const std::string& unit) {
  return seconds == 0 ? "-" : FormatTime(seconds, unit);
}

// `cp`: with a "CP comm" column (a run with context parallelism); `tables`:
// with an "of it tables" column after compute (a cluster with kernel-cost
// tables: the part of compute at their rates).
std::vector<std::string> TermCells(const pb::TimeTerms& t, const std::string& unit, bool cp,
                                   bool tables) {
  std::vector<std::string> cells = {TermTime(t.compute_s(), unit)};
  if (tables) cells.push_back(TermTime(t.table_s(), unit));
  cells.insert(cells.end(), {TermTime(t.memory_s(), unit), TermTime(t.st_exposed_s(), unit),
                             TermTime(t.tp_comm_s(), unit)});
  if (cp) cells.push_back(TermTime(t.cp_comm_s(), unit));
  cells.insert(cells.end(), {TermTime(t.total_s(), unit), TermTime(t.st_hidden_s(), unit),
                             TermTime(t.recompute_s(), unit)});
  return cells;
}

std::vector<std::string> TermHeader(bool cp, bool tables) {
  std::vector<std::string> header = {"compute"};
  if (tables) header.push_back("of it tables");
  header.insert(header.end(), {"memory", "ST exposed", "TP comm"});
  if (cp) header.push_back("CP comm");
  header.insert(header.end(), {"total", "ST hidden", "of it recompute"});
  return header;
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

std::string FormatExplanation(const pb::Report& r) {
  const pb::Explanation& e = r.explanation();
  const std::string& unit = r.time_unit();
  std::string out = "where the time goes, " + ScheduleLabel(r) + " (the " + r.cost_model() +
                    " model's terms, per device):\n\n";
  out += "one layer of each kind, one microbatch (T = " + Printf("%.0f", r.seq_len()) + " in " +
         std::to_string(r.chunks()) + " chunk" + (r.chunks() == 1 ? "" : "s") + "):\n";
  bool cp = false, tables = false;
  for (const pb::LayerKindTerms& k : e.kinds()) {
    cp = cp || k.forward().cp_comm_s() > 0 || k.backward().cp_comm_s() > 0;
    tables = tables || k.forward().table_s() > 0 || k.backward().table_s() > 0;
  }
  std::vector<std::vector<std::string>> rows = {
      Concat({"kind", "layers", "pass"}, TermHeader(cp, tables))};
  const pb::LayerKindTerms* recurrence = nullptr;
  for (const pb::LayerKindTerms& k : e.kinds()) {
    rows.push_back(Concat({k.kind(), std::to_string(k.layers()), "forward"},
                          TermCells(k.forward(), unit, cp, tables)));
    rows.push_back(Concat({"", "", "backward"}, TermCells(k.backward(), unit, cp, tables)));
    if (k.kind() == "recurrence") recurrence = &k;
  }
  out += AlignTable(rows, "  ");
  if (tables) {
    out += "(of it tables: the compute timed at the cluster's kernel-cost tables' rates, GEMMs, "
           "attention and recurrence cores; the rest of compute on the efficiency curve)\n";
  }

  out += "\nstate transition, one recurrence layer, one microbatch";
  if (recurrence == nullptr) {
    out += ": none (no recurrence layer)\n";
  } else if (r.compute_units() == 0) {
    out += ": not modelled (compute_units 0; --compute-units N turns it on)\n";
  } else {
    out += Printf(" (%.0f tiles", e.st_tiles()) + " of B_V " + std::to_string(r.st_tile()) +
           " on " + std::to_string(r.compute_units()) + " compute units: u = " +
           Printf("%.3g", e.st_coverage()) + "; split-and-overlap " +
           (r.st_overlap() ? "on" : "off") + "):\n";
    std::vector<std::vector<std::string>> st = {
        {"pass", "Pre", "ST", "Out", "exposed without overlap", "hidden", "exposed"}};
    const auto st_row = [&](const char* pass, const pb::StateTransitionTerms& t) {
      st.push_back({pass, TermTime(t.pre_s(), unit), TermTime(t.st_s(), unit),
                    TermTime(t.out_s(), unit), TermTime(t.exposed_without_overlap_s(), unit),
                    TermTime(t.hidden_s(), unit), TermTime(t.exposed_s(), unit)});
    };
    st_row("forward", recurrence->st_forward());
    st_row("backward", recurrence->st_backward());
    out += AlignTable(st, "  ");
  }

  // The device's per-action overhead (DeviceSpec.action_overhead_s), a
  // column of its own when the cluster has one.
  bool overhead = false;
  for (const pb::StageTerms& s : e.stages()) overhead = overhead || s.busy().overhead_s() > 0;
  out += "\nper stage, the whole step (" + FormatTime(r.step_time_s(), unit) +
         "): busy = compute + memory + ST exposed + TP comm" + (cp ? " + CP comm" : "") +
         (overhead ? " + per-action overhead" : "") +
         "; idle = step - busy - DP sync - optimizer\n";
  std::vector<std::string> header = TermHeader(cp, tables);
  // The "total" column of TermHeader (before "stage" is prepended).
  const std::size_t total_at = static_cast<std::size_t>(
      std::find(header.begin(), header.end(), "total") - header.begin());
  header[total_at] = "busy";
  if (overhead) header.insert(header.begin() + static_cast<std::ptrdiff_t>(total_at), "overhead");
  std::vector<std::vector<std::string>> stages = {
      Concat(Concat({"stage"}, header), {"DP sync", "optimizer", "idle"})};
  for (const pb::StageTerms& s : e.stages()) {
    std::vector<std::string> cells = TermCells(s.busy(), unit, cp, tables);
    if (overhead) {
      cells.insert(cells.begin() + static_cast<std::ptrdiff_t>(total_at),
                   TermTime(s.busy().overhead_s(), unit));
    }
    stages.push_back(Concat(Concat({std::to_string(s.stage())}, cells),
                            {TermTime(s.sync_s(), unit), TermTime(s.optimizer_s(), unit),
                             TermTime(s.idle_s(), unit)}));
  }
  out += AlignTable(stages, "  ");
  return out;
}

std::string FormatBytes(double bytes) {
  const double kib = 1024.0;
  if (bytes >= kib * kib * kib) return Printf("%.2f GiB", bytes / (kib * kib * kib));
  if (bytes >= kib * kib) return Printf("%.1f MiB", bytes / (kib * kib));
  if (bytes >= kib) return Printf("%.1f KiB", bytes / kib);
  return Printf("%.0f B", bytes);
}

std::string FormatTime(double seconds, const std::string& unit) {
  if (unit == "units") return Printf("%.4g units", seconds);
  if (seconds >= 1.0) return Printf("%.3f s", seconds);
  if (seconds >= 1e-3) return Printf("%.2f ms", seconds * 1e3);
  return Printf("%.2f us", seconds * 1e6);
}

std::string MessageToJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  options.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

void FillProvenance(int threads, pb::Report* report) {
  pb::Provenance* p = report->mutable_provenance();
  p->set_tool_version(SF_VERSION);
  p->set_git_commit(SF_GIT_COMMIT);
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) p->set_host(host);
  p->set_threads(threads);
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  p->set_timestamp(stamp);
}

std::string FormatSimulateTable(const pb::Report& report) {
  std::vector<const pb::Report*> all;
  for (const auto& c : report.comparisons()) all.push_back(&c);
  all.push_back(&report);  // baselines first, the schedule under study last

  std::string out = "scenario " + report.scenario() + ": model " + report.model() + ", P=" +
                    std::to_string(report.pipeline_size()) + " TP=" +
                    std::to_string(report.tensor_size()) + " DP=" +
                    std::to_string(report.data_size()) +
                    (report.context_size() > 1 ? " CP=" + std::to_string(report.context_size())
                                               : std::string()) +
                    ", M=" +
                    std::to_string(report.microbatches()) + ", T=" +
                    Printf("%.0f", report.seq_len()) + ", recompute " + report.recompute() +
                    (report.compute_units() > 0
                         ? ", ST overlap " + std::string(report.st_overlap() ? "on" : "off") +
                               " (B_V " + std::to_string(report.st_tile()) + ", " +
                               std::to_string(report.compute_units()) + " compute units)"
                         : std::string()) +
                    ", cost model " + report.cost_model() + "\n\n";
  // Rows are built first so that every column is as wide as its widest cell.
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  auto row = [&](const std::string& name, auto cell) {
    std::vector<std::string> cells;
    for (const pb::Report* r : all) cells.push_back(cell(*r));
    rows.emplace_back(name, std::move(cells));
  };
  row("", [](const pb::Report& r) { return ScheduleLabel(r); });
  row("system", [](const pb::Report& r) { return r.system().empty() ? std::string("stateflow") : r.system(); });
  if (std::any_of(all.begin(), all.end(), [](const pb::Report* r) { return !r->framework().empty(); })) {
    row("framework", [](const pb::Report& r) { return r.framework().empty() ? std::string("-") : r.framework(); });
  }
  const pb::Report* base = all.front();
  row("step time", [&](const pb::Report& r) {
    std::string s = FormatTime(r.step_time_s(), r.time_unit());
    if (&r != base && r.step_time_s() > 0) {
      s += Printf(" (%.2fx)", base->step_time_s() / r.step_time_s());
    }
    return s;
  });
  row("throughput", [](const pb::Report& r) { return Throughput(r); });
  row("bubble fraction",
      [](const pb::Report& r) { return Printf("%.1f %%", 100.0 * r.bubble_fraction()); });
  row("peak memory", [](const pb::Report& r) { return PeakWhere(r); });
  row("fits in " + FormatBytes(report.usable_bytes()) + " of " +
          FormatBytes(report.capacity_bytes()),
      [](const pb::Report& r) { return std::string(r.oom() ? "NO (OOM)" : "yes"); });
  std::vector<std::vector<std::string>> table;
  for (auto& [name, cells] : rows) {
    table.push_back({name});
    table.back().insert(table.back().end(), cells.begin(), cells.end());
  }
  out += AlignTable(table);
  if (all.size() > 1 && report.peak_memory_bytes() > 0) {
    out += Printf("\nmemory reduction vs the first column: %.2fx\n",
                  base->peak_memory_bytes() / report.peak_memory_bytes());
  }
  for (const pb::Report* r : all) {
    if (r->oom()) out += "OOM (" + ScheduleLabel(*r) + "): " + r->oom_detail() + "\n";
  }
  for (const pb::Report* r : all) out.append("\n").append(StageTable(*r));
  return out;
}

}  // namespace stateflow::tools
