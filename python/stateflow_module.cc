// `import stateflow`: the planner and the schedule core from Python
// (pybind11). Every function here calls the same libraries as the command
// line (scenario/, sim/, schedule/, tools/'s shared pieces): no second road.
// The Python package (python/stateflow/__init__.py) re-exports these and adds
// conveniences written in Python (sweep records as a DataFrame, runs given as
// dictionaries); python/stateflow/_stateflow.pyi types them.
//
// Errors: every Status becomes an exception carrying its one-line message
// (and, as `.detail`, the lines a command prints after it, e.g. a plan's
// grid): InputError (a ValueError) for bad input, PlanError (an InputError)
// for a plan or policy that breaks the rules, StateflowError for the rest.
// Nothing here exits the process.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/stat.h>

#include <google/protobuf/text_format.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/status.h"
#include "common/text.h"
#include "models/limits.h"
#include "models/memory_segment.h"
#include "models/model.h"
#include "scenario/load.h"
#include "scenario/resolve.h"
#include "schedule/greedy.h"
#include "schedule/plan.h"
#include "schedule/plan_text.h"
#include "schedule/policies.h"
#include "schedule/torch_csv.h"
#include "schedule/validator.h"
#include "sim/capacity_plan.h"
#include "sim/explain.h"
#include "sim/search.h"
#include "sim/simulation.h"
#include "tools/calibrate_run.h"
#include "tools/cli.h"
#include "tools/report_format.h"
#include "tools/work_bounds.h"

namespace py = pybind11;

namespace stateflow::python {
namespace {

// ---- errors -------------------------------------------------------------

PyObject* g_error = nullptr;        // stateflow.StateflowError(Exception)
PyObject* g_input_error = nullptr;  // stateflow.InputError(StateflowError, ValueError)
PyObject* g_plan_error = nullptr;   // stateflow.PlanError(InputError)

// A Status on its way to Python: the class it becomes and its text.
struct StatusError {
  PyObject* type;
  std::string message;
  std::string detail;
};

[[noreturn]] void Raise(const Status& s, PyObject* type = nullptr) {
  if (type == nullptr) {
    type = s.code() == Status::Code::kInvalidInput ? g_input_error : g_error;
  }
  throw StatusError{type, s.message(), s.detail()};
}

template <typename T>
T Take(Result<T> r, PyObject* type = nullptr) {
  if (!r.ok()) Raise(r.status(), type);
  return std::move(r).value();
}

void Check(const Status& s, PyObject* type = nullptr) {
  if (!s.ok()) Raise(s, type);
}

// ---- scenarios ----------------------------------------------------------

struct PyScenario {
  scenario::ResolvedScenario resolved;
};

std::string ProtoText(const google::protobuf::Message& m) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(m, &text);
  return text;
}

bool IsFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The keyword arguments of stateflow.scenario() and Scenario.with_(), each
// an override of the command line's scenario flags (tools/cli.h).
constexpr const char* kScenarioKeywords[] = {
    "model", "cluster", "policy", "N", "chunks", "alpha", "M", "microbatches", "B",
    "microbatch_size", "P", "stages", "TP", "tensor_parallel", "DP", "data_parallel", "CP",
    "context_parallel", "distributed_optimizer", "overlap_grad_reduce", "virtual_stages", "T", "seq_len", "recompute", "system",
    "cost_model", "st_overlap", "st_tile", "compute_units", "max_actions", "vary"};

std::string KnownKeywords() {
  std::string out;
  for (const char* k : kScenarioKeywords) out += (out.empty() ? "" : ", ") + std::string(k);
  return out;
}

long long IntArg(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::bool_>(v) || !py::isinstance<py::int_>(v)) {
    Raise(Status::Invalid(key + ": expected a whole number, got " +
                          std::string(py::str(py::repr(v)))));
  }
  try {
    return v.cast<long long>();
  } catch (const py::cast_error&) {  // beyond 64 bits
    Raise(Status::Invalid(key + ": " + std::string(py::str(py::repr(v))) + " is out of range"));
  }
}

double FloatArg(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::bool_>(v) ||
      !(py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v))) {
    Raise(Status::Invalid(key + ": expected a number, got " + std::string(py::str(py::repr(v)))));
  }
  return v.cast<double>();
}

std::string StrArg(const std::string& key, const py::handle& v) {
  if (!py::isinstance<py::str>(v)) {
    Raise(Status::Invalid(key + ": expected a string, got " + std::string(py::str(py::repr(v)))));
  }
  return v.cast<std::string>();
}

std::string OnOff(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>() ? "on" : "off";
  const std::string s = StrArg(key, v);
  if (s != "on" && s != "off") Raise(Status::Invalid(key + ": '" + s + "' is not on or off"));
  return s;
}

tools::ScenarioFlags FlagsFrom(const py::dict& kw) {
  tools::ScenarioFlags f;
  for (const auto& [k, v] : kw) {
    const std::string key = py::str(k);
    if (v.is_none()) continue;  // "not given"
    if (key == "model") f.model_preset = StrArg(key, v);
    else if (key == "cluster") f.cluster_preset = StrArg(key, v);
    else if (key == "policy") f.policy = StrArg(key, v);
    else if (key == "N" || key == "chunks") f.chunks = IntArg(key, v);
    else if (key == "alpha") f.alpha = FloatArg(key, v);
    else if (key == "M" || key == "microbatches") f.microbatches = IntArg(key, v);
    else if (key == "B" || key == "microbatch_size") f.microbatch_size = IntArg(key, v);
    else if (key == "P" || key == "stages") f.stages = IntArg(key, v);
    else if (key == "TP" || key == "tensor_parallel") f.tensor_size = IntArg(key, v);
    else if (key == "DP" || key == "data_parallel") f.data_size = IntArg(key, v);
    else if (key == "CP" || key == "context_parallel") f.context_size = IntArg(key, v);
    else if (key == "distributed_optimizer") f.distributed_optimizer = OnOff(key, v);
    else if (key == "overlap_grad_reduce") f.overlap_grad_reduce = OnOff(key, v);
    else if (key == "virtual_stages") f.virtual_stages = IntArg(key, v);
    else if (key == "T" || key == "seq_len") f.seq_len = IntArg(key, v);
    else if (key == "recompute") f.recompute = StrArg(key, v);
    else if (key == "system") f.system = StrArg(key, v);
    else if (key == "cost_model") f.cost_model = StrArg(key, v);
    else if (key == "st_overlap") f.st_overlap = OnOff(key, v);
    else if (key == "st_tile") f.st_tile = IntArg(key, v);
    else if (key == "compute_units") f.compute_units = IntArg(key, v);
    else if (key == "max_actions") f.max_actions = IntArg(key, v);
    else if (key == "vary") {
      if (!py::isinstance<py::dict>(v)) {
        Raise(Status::Invalid("vary: expected a dict {parameter: factor}"));
      }
      for (const auto& [name, factor] : v.cast<py::dict>()) {
        const std::string n = StrArg("vary", name);
        std::string item = n;
        item += '=';
        item += py::str(py::float_(FloatArg("vary[" + n + "]", factor))).cast<std::string>();
        f.vary.push_back(std::move(item));
      }
    } else {
      Raise(Status::Invalid("unknown scenario field '" + key + "' (known: " + KnownKeywords() + ")"));
    }
  }
  return f;
}

// The command line's one road (tools::LoadResolvedScenario), from `base`'s
// text or the embedded default.
PyScenario Build(const std::optional<std::string>& base_text, const std::string& base_name,
                 const py::dict& kw) {
  const tools::ScenarioFlags flags = FlagsFrom(kw);
  if (base_text) return {Take(tools::LoadResolvedScenario(flags, *base_text, base_name))};
  return {Take(tools::LoadResolvedScenario(flags))};
}

PyScenario LoadScenario(const std::string& path_or_text) {
  if (IsFile(path_or_text)) {
    const std::string text = Take(ReadTextFile(path_or_text));
    return Build(text, path_or_text, py::dict());
  }
  if (path_or_text.find_first_of("{:\n") == std::string::npos) {
    Raise(Status::Invalid("load_scenario: '" + Printable(path_or_text) +
                          "' is neither a file nor scenario text"));
  }
  return Build(path_or_text, "<scenario text>", py::dict());
}

PyScenario With(const PyScenario& s, const py::kwargs& kw) {
  return Build(ProtoText(s.resolved.proto()), "<scenario>", kw);
}

std::string ScenarioRepr(const PyScenario& s) {
  const pb::Scenario& p = s.resolved.proto();
  return "Scenario(model=" + p.model().name() + ", cluster=" + p.cluster().name() +
         ", P=" + std::to_string(p.parallel().pipeline_size()) +
         ", TP=" + std::to_string(p.parallel().tensor_size()) +
         ", DP=" + std::to_string(p.parallel().data_size()) +
         ", M=" + std::to_string(p.parallel().microbatches()) +
         ", N=" + std::to_string(p.schedule().chunks()) + ", T=" + std::to_string(p.seq_len()) +
         ", policy=" + p.schedule().policy() + ")";
}

// ---- plans --------------------------------------------------------------

struct PyPlan {
  schedule::Plan plan;
};

schedule::Action ActionFrom(const py::handle& item, int stage) {
  if (py::isinstance<py::str>(item)) {
    return Take(schedule::ParseAction(item.cast<std::string>()), g_plan_error);
  }
  if (py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item)) {
    const py::sequence t = item.cast<py::sequence>();
    // (pass, microbatch, chunk) on the list's stage, or (stage, pass, microbatch, chunk).
    if (t.size() != 3 && t.size() != 4) {
      Raise(Status::Invalid("stage " + std::to_string(stage) + ": action " +
                            std::string(py::str(py::repr(item))) +
                            " is not (pass, microbatch, chunk) or (stage, pass, microbatch, chunk)"),
            g_plan_error);
    }
    const std::size_t o = t.size() - 3;
    const int r = o == 1 ? static_cast<int>(IntArg("stage", t[0])) : stage;
    const std::string pass = StrArg("pass", t[o]);
    std::string text = std::to_string(r) + pass + std::to_string(IntArg("microbatch", t[o + 1])) +
                       "." + std::to_string(IntArg("chunk", t[o + 2]));
    return Take(schedule::ParseAction(text), g_plan_error);
  }
  Raise(Status::Invalid("stage " + std::to_string(stage) + ": action " +
                        std::string(py::str(py::repr(item))) + " is neither text (\"2F0.3\") nor a tuple"),
        g_plan_error);
}

PyPlan PlanFromActions(const py::sequence& per_stage, const std::string& policy,
                       std::optional<int> microbatches, std::optional<int> chunks) {
  std::vector<std::vector<schedule::Action>> lists;
  int max_mb = -1, max_chunk = -1;
  for (std::size_t r = 0; r < per_stage.size(); ++r) {
    const py::handle stage_list = per_stage[r];
    if (py::isinstance<py::str>(stage_list) || !py::isinstance<py::sequence>(stage_list)) {
      Raise(Status::Invalid("stage " + std::to_string(r) + ": expected a list of actions"),
            g_plan_error);
    }
    std::vector<schedule::Action> list;
    for (const py::handle item : stage_list.cast<py::sequence>()) {
      schedule::Action a = ActionFrom(item, static_cast<int>(r));
      if (a.stage != static_cast<int>(r)) {
        Raise(Status::Invalid("stage " + std::to_string(r) + " step " +
                              std::to_string(list.size()) + ": action " + schedule::ToString(a) +
                              " names stage " + std::to_string(a.stage)),
              g_plan_error);
      }
      max_mb = std::max(max_mb, a.microbatch);
      max_chunk = std::max(max_chunk, a.chunk);
      list.push_back(a);
    }
    lists.push_back(std::move(list));
  }
  if (lists.empty()) Raise(Status::Invalid("a plan needs at least one stage"), g_plan_error);
  const int M = microbatches.value_or(max_mb + 1), N = chunks.value_or(max_chunk + 1);
  if (policy.empty() || policy.find_first_of(" \t\r\n#") != std::string::npos) {
    Raise(Status::Invalid("policy name '" + policy + "' must be one token"), g_plan_error);
  }
  const int P = static_cast<int>(lists.size());
  schedule::Plan plan(policy, P, M, N, std::move(lists));
  // Round trip through the text form: its checks (counts, ranges) apply.
  return {Take(schedule::ParsePlanText(schedule::PlanToText(plan), "<plan>"), g_plan_error)};
}

py::list StageActions(const schedule::Plan& plan, int r) {
  py::list out;
  for (const schedule::Action& a : plan.stage(r)) out.append(schedule::ToString(a));
  return out;
}

void ValidatePlan(const PyPlan& p) { Check(schedule::ValidatePlan(p.plan), g_plan_error); }

PyPlan PlanFromPolicy(const py::function& choose, int P, int M, int N, const std::string& name,
                      double forward_time, double backward_time, bool split_backward,
                      double weight_time, int virtual_stages, const std::string& placement) {
  const std::optional<schedule::StagePlacement> where = schedule::ParseStagePlacement(placement);
  if (!where) {
    Check(Status::Invalid("placement: unknown '" + placement + "' (known: loop, v)"),
          g_plan_error);
  }
  std::optional<py::error_already_set> raised;
  const schedule::ChoosePolicy policy =
      [&](int stage, int /*step*/, const std::vector<schedule::Action>& ready)
      -> Result<std::optional<schedule::Action>> {
    py::list texts;
    for (const schedule::Action& a : ready) texts.append(schedule::ToString(a));
    py::object chosen;
    try {
      chosen = choose(stage, texts);
    } catch (py::error_already_set& e) {
      raised = std::move(e);
      return Status::Internal("the policy raised");
    }
    if (chosen.is_none()) return std::optional<schedule::Action>();
    if (py::isinstance<py::int_>(chosen) && !py::isinstance<py::bool_>(chosen)) {
      const long long k = chosen.cast<long long>();
      if (k < 0 || k >= static_cast<long long>(ready.size())) {
        return Status::Invalid("chose index " + std::to_string(k) + " of " +
                               std::to_string(ready.size()) + " ready actions");
      }
      return std::optional<schedule::Action>(ready[static_cast<std::size_t>(k)]);
    }
    if (!py::isinstance<py::str>(chosen)) {
      return Status::Invalid("returned " + std::string(py::str(py::repr(chosen))) +
                             ", not an action's text, an index into ready, or None");
    }
    SF_ASSIGN_OR_RETURN(schedule::Action a, schedule::ParseAction(chosen.cast<std::string>()));
    return std::optional<schedule::Action>(a);
  };
  Result<schedule::Plan> plan = schedule::PlanFromPolicy(
      P, M, N, policy,
      {.policy_name = name,
       .forward_time = forward_time,
       .backward_time = backward_time,
       .split_backward = split_backward,
       .weight_time = weight_time,
       .virtual_stages = virtual_stages,
       .placement = *where});
  if (raised) throw std::move(*raised);
  return {Take(std::move(plan), g_plan_error)};
}

// ---- reports --------------------------------------------------------------

struct PyReport {
  pb::Report report;
  std::shared_ptr<const sim::Simulation> sim;  // its timeline and configuration
};

PyReport MakeReport(sim::Simulation simulation) {
  PyReport r;
  r.report = simulation.report;
  r.sim = std::make_shared<const sim::Simulation>(std::move(simulation));
  return r;
}

py::list Trace(const PyReport& r) {
  py::list out;
  const auto& stages = r.sim->engine.stages;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    for (const sim::Slice& slice : stages[s].slices) {
      py::dict d;
      d["action"] = schedule::ToString(slice.action);
      d["stage"] = slice.action.stage;
      d["kind"] = std::string(1, schedule::PassLetter(slice.action.pass));
      d["microbatch"] = slice.action.microbatch;
      d["chunk"] = slice.action.chunk;
      d["start"] = slice.start_s;
      d["end"] = slice.end_s;
      out.append(std::move(d));
    }
  }
  return out;
}

py::list MemoryTimeline(const PyReport& r) {
  py::list out;
  const auto& stages = r.sim->engine.stages;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    for (const sim::MemorySample& m : stages[s].memory) {
      out.append(py::make_tuple(static_cast<int>(s), m.time_s, models::TotalBytes(m.bytes)));
    }
  }
  return out;
}

std::string Explain(const PyReport& r) {
  pb::Report copy = r.report;
  *copy.mutable_explanation() = Take(sim::Explain(*r.sim));
  return tools::FormatExplanation(copy);
}

std::string ReportRepr(const PyReport& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "Report(policy=%s, P=%u, M=%u, N=%u, step_time_s=%.6g, tokens_per_s=%.6g, "
                "bubble=%.4f, peak=%s%s)",
                r.report.policy().c_str(), r.report.pipeline_size(), r.report.microbatches(),
                r.report.chunks(), r.report.step_time_s(), r.report.tokens_per_s(),
                r.report.bubble_fraction(), tools::FormatBytes(r.report.peak_memory_bytes()).c_str(),
                r.report.oom() ? ", OOM" : "");
  return buf;
}

std::optional<sim::CostTableIndex> Costs(const std::optional<std::string>& path,
                                         const pb::Scenario& scenario) {
  if (!path) return std::nullopt;
  return Take(tools::LoadCostsFor(*path, scenario));
}

py::list Simulate(const PyScenario& s, const PyPlan* plan, const std::optional<std::string>& costs_path,
                  bool baselines) {
  scenario::ResolvedScenario resolved = s.resolved;
  std::optional<sim::CostTableIndex> costs = Costs(costs_path, resolved.proto());
  pb::ScheduleSpec schedule = resolved.proto().schedule();
  if (plan != nullptr) {
    Check(schedule::ValidatePlan(plan->plan), g_plan_error);
    // The plan decides the chunk count; a policy name the schedule core does
    // not know (a plan from Python) is simulated as a StateFlow schedule
    // (the spec's policy only names it) and reported by its own name.
    schedule.set_chunks(static_cast<std::uint32_t>(plan->plan.chunks()));
    bool known = false;
    for (const std::string& n : schedule::PolicyNames()) known |= n == plan->plan.policy();
    schedule.set_policy(known ? plan->plan.policy() : "stateflow");
    resolved = Take(resolved.WithSchedule(schedule));
  }
  Check(tools::CheckPlanBounds(resolved.proto(), nullptr, std::nullopt));
  sim::SimulationOptions options{.record_timeline = true,
                                 .plan = plan != nullptr ? &plan->plan : nullptr,
                                 .costs = costs ? &*costs : nullptr};
  py::list out;
  {
    sim::Simulation primary = Take(sim::Simulate(resolved, resolved.proto().schedule(), options));
    if (plan != nullptr) primary.report.set_policy(plan->plan.policy());
    out.append(py::cast(MakeReport(std::move(primary))));
  }
  if (baselines && plan == nullptr) {
    for (int b = 0; b < resolved.proto().baselines_size(); ++b) {
      Result<sim::Simulation> base = sim::Simulate(
          resolved, resolved.proto().baselines(b),
          {.record_timeline = true, .costs = options.costs});
      if (!base.ok()) Raise(base.status().WithPrefix("baselines[" + std::to_string(b) + "]"));
      out.append(py::cast(MakeReport(std::move(base).value())));
    }
  }
  return out;
}

// ---- sweeps, capacity, calibration ------------------------------------------

// Calls add(item) for the value of `key` in kw, or for each of its items
// when it is a list, tuple or set; nothing when it is absent or None.
template <typename Add>
void Range(const py::dict& kw, const char* key, Add add) {
  if (!kw.contains(key) || kw[key].is_none()) return;
  py::object v = kw[key];
  py::list items;
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v) || py::isinstance<py::set>(v)) {
    for (const py::handle h : v) items.append(h);
  } else {
    items.append(v);
  }
  for (const py::handle h : items) add(h);
}

pb::SweepSpec SweepFrom(const pb::SweepSpec& base, const py::dict& kw) {
  static const char* kKnown[] = {"policies", "seq_len", "global_batch", "microbatches",
                                 "chunks",   "alpha",   "st_overlap",   "st_tile",
                                 "virtual_stages"};
  for (const auto& [k, v] : kw) {
    const std::string key = py::str(k);
    bool known = false;
    for (const char* n : kKnown) known |= key == n;
    if (!known) {
      Raise(Status::Invalid("unknown sweep range '" + key +
                            "' (known: policies, seq_len, global_batch, microbatches, chunks, "
                            "alpha, st_overlap, st_tile, virtual_stages)"));
    }
  }
  pb::SweepSpec s = base;
  // A range given replaces the scenario's; global_batch and microbatches
  // replace each other.
  auto given = [&](const char* key) { return kw.contains(key) && !kw[key].is_none(); };
  if (given("policies")) s.clear_policies();
  if (given("seq_len")) s.clear_seq_len();
  if (given("global_batch") || given("microbatches")) {
    s.clear_global_batch();
    s.clear_microbatches();
  }
  if (given("chunks")) s.clear_chunks();
  if (given("alpha")) s.clear_alpha();
  if (given("st_overlap")) s.clear_st_overlap();
  if (given("st_tile")) s.clear_st_tile();
  if (given("virtual_stages")) s.clear_virtual_stages();
  auto checked_u32 = [](const std::string& key, long long v) {
    if (v < 0 || v > 0xffffffffLL) {
      Raise(Status::Invalid(key + ": " + std::to_string(v) + " is out of range"));
    }
    return static_cast<std::uint32_t>(v);
  };
  Range(kw, "policies", [&](py::handle h) { s.add_policies(StrArg("policies", h)); });
  Range(kw, "seq_len", [&](py::handle h) {
    const long long v = IntArg("seq_len", h);
    if (v < 0) Raise(Status::Invalid("seq_len: " + std::to_string(v) + " is out of range"));
    s.add_seq_len(static_cast<std::uint64_t>(v));
  });
  Range(kw, "global_batch",
                   [&](py::handle h) { s.add_global_batch(checked_u32("global_batch", IntArg("global_batch", h))); });
  Range(kw, "microbatches",
                   [&](py::handle h) { s.add_microbatches(checked_u32("microbatches", IntArg("microbatches", h))); });
  Range(kw, "chunks", [&](py::handle h) { s.add_chunks(checked_u32("chunks", IntArg("chunks", h))); });
  Range(kw, "alpha", [&](py::handle h) { s.add_alpha(FloatArg("alpha", h)); });
  Range(kw, "st_overlap", [&](py::handle h) { s.add_st_overlap(OnOff("st_overlap", h) == "on"); });
  Range(kw, "st_tile", [&](py::handle h) { s.add_st_tile(checked_u32("st_tile", IntArg("st_tile", h))); });
  Range(kw, "virtual_stages", [&](py::handle h) {
    s.add_virtual_stages(checked_u32("virtual_stages", IntArg("virtual_stages", h)));
  });
  return s;
}

py::dict RunRecord(const pb::SweepRun& run) {
  py::dict d;
  d["policy"] = run.policy();
  d["seq_len"] = static_cast<long long>(run.seq_len());
  d["global_batch"] = run.global_batch();
  d["microbatches"] = run.microbatches();
  d["chunks"] = run.chunks();
  d["alpha"] = run.alpha();
  d["recompute"] = run.recompute();
  d["system"] = run.system();
  d["st_overlap"] = run.st_overlap();
  d["st_tile"] = run.st_tile();
  d["virtual_stages"] = std::max(1u, run.virtual_stages());
  d["step_time_s"] = run.step_time_s();
  d["tokens_per_s"] = run.tokens_per_s();
  d["bubble_fraction"] = run.bubble_fraction();
  d["peak_memory_bytes"] = run.peak_memory_bytes();
  d["oom"] = run.oom();
  d["peak_stage"] = run.peak_stage();
  d["peak_class"] = run.peak_class();
  d["best"] = run.best();
  d["reused"] = run.reused();
  d["num_tasks"] = run.num_tasks();
  return d;
}

py::tuple Sweep(const PyScenario& s, const std::optional<std::string>& costs_path, const py::dict& kw) {
  const pb::SweepSpec sweep = SweepFrom(s.resolved.proto().sweep(), kw);
  Check(tools::CheckPlanBounds(s.resolved.proto(), &sweep, std::nullopt));
  std::optional<sim::CostTableIndex> costs = Costs(costs_path, s.resolved.proto());
  Result<pb::SweepReport> report = [&] {
    py::gil_scoped_release release;
    sim::SweepOptions options;
    options.costs = costs ? &*costs : nullptr;
    return sim::RunSweep(s.resolved, sweep, options);
  }();
  const pb::SweepReport r = Take(std::move(report));
  py::list records;
  for (const pb::SweepRun& run : r.runs()) records.append(RunRecord(run));
  py::list notes;
  for (const std::string& n : r.notes()) notes.append(n);
  return py::make_tuple(records, notes, tools::MessageToJson(r));
}

std::string Capacity(const PyScenario& s, std::optional<int> devices, std::optional<long long> seq_len,
                     std::optional<int> global_batch, const std::vector<int>& context_sizes,
                     const std::optional<std::string>& costs_path, const py::dict& ranges) {
  const pb::ParallelSpec& par = s.resolved.proto().parallel();
  auto one = [](std::uint32_t v) { return static_cast<int>(std::max(1u, v)); };
  sim::CapacityPlanRequest request;
  // The command line's defaults: the scenario's P x TP x DP devices and
  // M x microbatch size x DP sequences.
  request.devices = devices.value_or(one(par.pipeline_size()) * one(par.tensor_size()) *
                                     one(par.data_size()));
  request.global_batch = global_batch.value_or(one(par.microbatches()) *
                                               one(par.microbatch_size()) * one(par.data_size()));
  request.seq_len = seq_len.value_or(s.resolved.seq_len());
  if (request.devices < 1 || request.devices > (1 << 20)) {
    Raise(Status::Invalid("devices must be in [1, 1048576] (got " + std::to_string(request.devices) + ")"));
  }
  if (request.global_batch < 1 || request.global_batch > (1 << 20)) {
    Raise(Status::Invalid("global_batch must be in [1, 1048576] (got " +
                          std::to_string(request.global_batch) + ")"));
  }
  for (int cp : context_sizes) {
    Check(models::CheckRange("context_parallel", static_cast<std::int64_t>(cp), models::kContextSize));
  }
  request.context_sizes = context_sizes;
  request.sweep = SweepFrom(pb::SweepSpec(), ranges);
  // P, TP, DP and M are set per split; P = TP = DP = CP = 1 here, so that
  // the scenario's own split need not suit the question.
  pb::ParallelSpec single = par;
  single.set_pipeline_size(1);
  single.set_tensor_size(1);
  single.set_data_size(1);
  single.set_context_size(1);
  scenario::ResolvedScenario base = Take(s.resolved.WithParallel(single));
  if (seq_len) base = Take(base.WithSeqLen(*seq_len));
  pb::Scenario largest = base.proto();
  largest.mutable_parallel()->set_pipeline_size(static_cast<std::uint32_t>(request.devices));
  const std::int64_t per_microbatch = std::max(1u, base.proto().parallel().microbatch_size());
  largest.mutable_parallel()->set_microbatches(static_cast<std::uint32_t>(
      std::min<std::int64_t>((request.global_batch + per_microbatch - 1) / per_microbatch, UINT32_MAX)));
  Check(tools::CheckPlanBounds(largest, &request.sweep, std::nullopt));
  std::optional<sim::CostTableIndex> costs = Costs(costs_path, base.proto());
  Result<pb::CapacityPlanReport> report = [&] {
    py::gil_scoped_release release;
    sim::SweepOptions options;
    options.costs = costs ? &*costs : nullptr;
    return sim::PlanCapacity(base, request, options);
  }();
  return tools::MessageToJson(Take(std::move(report)));
}

py::tuple Calibrate(const PyScenario& s, const std::string& runs_text, const std::string& source,
                    const std::string& fit, double prior_weight, int max_iterations,
                    const std::string& dtype) {
  if (!std::isfinite(prior_weight) || prior_weight < 0) {
    Raise(Status::Invalid("prior_weight must be finite and >= 0"));
  }
  if (max_iterations < 1 || max_iterations > 100000) {
    Raise(Status::Invalid("max_iterations must be in [1, 100000]"));
  }
  Result<tools::CalibrateResult> result = [&] {
    py::gil_scoped_release release;
    return tools::CalibrateRunsCsv(s.resolved, {.runs_text = runs_text,
                                                .runs_source = source,
                                                .fit_list = fit,
                                                .dtype = dtype,
                                                .prior_weight = prior_weight,
                                                .max_iterations = max_iterations,
                                                .max_actions = std::nullopt,
                                                .cluster_label = ""});
  }();
  tools::CalibrateResult r = Take(std::move(result));
  // The base scenario on the fitted cluster, ready to simulate.
  pb::Scenario fitted = s.resolved.proto();
  fitted.clear_cluster_preset();
  *fitted.mutable_cluster() = r.fit.cluster;
  PyScenario calibrated{Take(scenario::Resolve(std::move(fitted)))};
  return py::make_tuple(tools::MessageToJson(r.fit.report), r.preset_text, calibrated);
}

std::string LoadCostTable(const std::string& path) {
  return tools::MessageToJson(Take(scenario::LoadCostTableFile(path)));
}

py::dict Presets() {
  py::dict d;
  d["models"] = models::ModelPresetNames();
  d["clusters"] = models::ClusterPresetNames();
  return d;
}

}  // namespace
}  // namespace stateflow::python

PYBIND11_MODULE(_stateflow, m) {
  using namespace stateflow;
  using namespace stateflow::python;
  m.doc() = "StateFlow's planner and schedule core (the compiled part of `stateflow`).";

  g_error = PyErr_NewException("stateflow.StateflowError", PyExc_Exception, nullptr);
  py::tuple input_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_input_error = PyErr_NewException("stateflow.InputError", input_bases.ptr(), nullptr);
  g_plan_error = PyErr_NewException("stateflow.PlanError", g_input_error, nullptr);
  m.attr("StateflowError") = py::handle(g_error);
  m.attr("InputError") = py::handle(g_input_error);
  m.attr("PlanError") = py::handle(g_plan_error);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object exc = py::reinterpret_borrow<py::object>(e.type)(e.message);
      exc.attr("detail") = e.detail;
      PyErr_SetObject(e.type, exc.ptr());
    }
  });

  py::class_<PyScenario>(m, "Scenario",
                         "A resolved scenario: model, cluster, parallelism, schedule, with "
                         "presets merged and every field checked.")
      .def("with_", &With,
           "A copy with fields changed (the keywords of stateflow.scenario()), checked again.")
      .def_property_readonly("text", [](const PyScenario& s) { return ProtoText(s.resolved.proto()); },
                             "The resolved scenario in protobuf text format (loadable again).")
      .def("to_json", [](const PyScenario& s) { return tools::MessageToJson(s.resolved.proto()); })
      .def_property_readonly("name", [](const PyScenario& s) { return s.resolved.proto().name(); })
      .def_property_readonly("model", [](const PyScenario& s) { return s.resolved.proto().model().name(); })
      .def_property_readonly("cluster", [](const PyScenario& s) { return s.resolved.proto().cluster().name(); })
      .def_property_readonly("policy", [](const PyScenario& s) { return s.resolved.proto().schedule().policy(); })
      .def_property_readonly("P", [](const PyScenario& s) { return s.resolved.stages(); })
      .def_property_readonly("M", [](const PyScenario& s) { return s.resolved.microbatches(); })
      .def_property_readonly("N", [](const PyScenario& s) { return static_cast<int>(s.resolved.proto().schedule().chunks()); })
      .def_property_readonly("T", [](const PyScenario& s) { return static_cast<long long>(s.resolved.seq_len()); })
      .def_property_readonly("TP", [](const PyScenario& s) { return static_cast<int>(s.resolved.proto().parallel().tensor_size()); })
      .def_property_readonly("DP", [](const PyScenario& s) { return static_cast<int>(s.resolved.proto().parallel().data_size()); })
      .def_property_readonly("alpha", [](const PyScenario& s) { return s.resolved.proto().schedule().alpha(); })
      .def("__repr__", &ScenarioRepr);

  m.def("_load_scenario", &LoadScenario, py::arg("path_or_text"));
  m.def("_scenario", [](const py::kwargs& kw) { return Build(std::nullopt, "", kw); });

  py::class_<PyPlan>(m, "Plan", "Each pipeline stage's actions in issue order.")
      .def_static("from_actions", &PlanFromActions, py::arg("per_stage"), py::arg("policy") = "custom",
                  py::arg("microbatches") = py::none(), py::arg("chunks") = py::none(),
                  "A plan from per-stage lists of actions: text (\"2F0.3\") or tuples "
                  "(pass, microbatch, chunk) or (stage, pass, microbatch, chunk). M and N "
                  "default to the largest microbatch and chunk named, plus one. Not validated: "
                  "see validate_plan().")
      .def_static("from_text", [](const std::string& text) {
        return PyPlan{Take(schedule::ParsePlanText(text, "<plan>"), g_plan_error)};
      }, py::arg("text"), "Parses the text form (plan-dump's).")
      .def_static("from_torch_csv", [](const std::string& text, int chunks, const std::string& policy) {
        return PyPlan{Take(schedule::ParseTorchCsv(text, "<torch csv>", chunks, policy), g_plan_error)};
      }, py::arg("text"), py::arg("chunks") = 1, py::arg("policy") = "torch",
         "A plan from torch.distributed.pipelining's schedule CSV (compute only: one row per rank, "
         "cells like 0F3, 1I0, 2W1; its microbatch m is our (m // chunks, m % chunks)).")
      .def("to_torch_csv", [](const PyPlan& p) { return schedule::PlanToTorchCsv(p.plan); },
           "The plan as torch.distributed.pipelining's schedule CSV (its _load_csv reads it).")
      .def("text", [](const PyPlan& p) { return schedule::PlanToText(p.plan); },
           "The text form: `stateflow simulate --plan FILE` reads it.")
      .def("grid", [](const PyPlan& p) { return schedule::PlanGrid(p.plan); },
           "One row per stage, one column per step, for reading.")
      .def("actions", [](const PyPlan& p, int r) {
        if (r < 0 || r >= p.plan.stages()) {
          Raise(Status::Invalid("stage " + std::to_string(r) + " is not in [0, " +
                                std::to_string(p.plan.stages()) + ")"));
        }
        return StageActions(p.plan, r);
      }, py::arg("stage"), "Stage r's actions in issue order, as text.")
      .def("per_stage", [](const PyPlan& p) {
        py::list out;
        for (int r = 0; r < p.plan.stages(); ++r) out.append(StageActions(p.plan, r));
        return out;
      })
      .def_property_readonly("policy", [](const PyPlan& p) { return p.plan.policy(); })
      .def_property_readonly("P", [](const PyPlan& p) { return p.plan.stages(); })
      .def_property_readonly("M", [](const PyPlan& p) { return p.plan.microbatches(); })
      .def_property_readonly("N", [](const PyPlan& p) { return p.plan.chunks(); })
      .def_property_readonly("virtual_stages", [](const PyPlan& p) { return p.plan.virtual_stages(); })
      .def_property_readonly("placement", [](const PyPlan& p) {
        return std::string(schedule::StagePlacementName(p.plan.placement()));
      })
      .def_property_readonly("num_actions", [](const PyPlan& p) { return p.plan.num_actions(); })
      .def("__eq__", [](const PyPlan& a, const PyPlan& b) { return a.plan == b.plan; })
      .def("__repr__", [](const PyPlan& p) {
        return "Plan(policy=" + p.plan.policy() + ", P=" + std::to_string(p.plan.stages()) +
               ", M=" + std::to_string(p.plan.microbatches()) + ", N=" +
               std::to_string(p.plan.chunks()) + ")";
      });

  m.def("make_plan", [](const std::string& policy, int P, int M, int N,
                        std::optional<int> virtual_stages) {
    const int v = virtual_stages.value_or(schedule::DefaultVirtualStages(policy));
    return PyPlan{Take(schedule::MakePlan(policy, P, M, N, v))};
  }, py::arg("policy"), py::arg("P"), py::arg("M"), py::arg("N") = 1,
        py::arg("virtual_stages") = py::none(),
        "The plan the schedule core makes for a policy by name (see policies()); "
        "virtual_stages > 1 for policy interleaved; zbv has 2 (its V) unless told.");
  m.def("validate_plan", &ValidatePlan, py::arg("plan"),
        "None, or PlanError naming the broken rule, stage and step (.detail: the grid).");
  m.def("plan_from_policy", &PlanFromPolicy, py::arg("choose"), py::arg("P"), py::arg("M"),
        py::arg("N") = 1, py::kw_only(), py::arg("name") = "custom",
        py::arg("forward_time") = 1.0, py::arg("backward_time") = 2.0,
        py::arg("split_backward") = false, py::arg("weight_time") = 1.0,
        py::arg("virtual_stages") = 1, py::arg("placement") = "loop",
        "A plan made by an issue policy written in Python, run by the schedule core's greedy "
        "executor: whenever stage r is idle, choose(r, ready) gets the texts of its ready "
        "actions (backwards first, then forwards, each by microbatch and chunk, then with "
        "split_backward the W passes of its backwards, oldest first) and returns "
        "one of them (or its index), or None to wait until another action finishes. Passes "
        "take forward_time, backward_time and weight_time units; split_backward=True splits "
        "each backward into B (input gradient) and W (weight gradients, any time after its "
        "B: a zero-bubble schedule). virtual_stages=v puts v model stages on each stage, "
        "placed 'loop' (model stage s on stage s mod P) or 'v' (v = 2, ZBV's V); actions then "
        "name their model stage and each stage's ready list runs its model stages from the "
        "last in the layer order to the first. A choice not ready, or a policy that "
        "deadlocks (every stage idle and waiting), raises PlanError naming the stage and step; "
        "an exception raised by choose propagates.");
  m.def("policies", [] { return schedule::PolicyNames(); });
  m.def("presets", &Presets);

  py::class_<PyReport>(m, "Report", py::dynamic_attr(), "One simulated schedule of a scenario.")
      .def_property_readonly("step_time_s", [](const PyReport& r) { return r.report.step_time_s(); })
      .def_property_readonly("throughput_tokens_per_s", [](const PyReport& r) { return r.report.tokens_per_s(); })
      .def_property_readonly("bubble_fraction", [](const PyReport& r) { return r.report.bubble_fraction(); })
      .def_property_readonly("peak_bytes", [](const PyReport& r) {
        std::vector<double> out;
        for (const auto& s : r.report.stages()) out.push_back(s.peak_memory_bytes());
        return out;
      }, "Each stage's peak memory in bytes.")
      .def_property_readonly("peak_memory_bytes", [](const PyReport& r) { return r.report.peak_memory_bytes(); })
      .def_property_readonly("oom", [](const PyReport& r) { return r.report.oom(); })
      .def_property_readonly("oom_detail", [](const PyReport& r) { return r.report.oom_detail(); })
      .def_property_readonly("policy", [](const PyReport& r) { return r.report.policy(); })
      .def_property_readonly("P", [](const PyReport& r) { return static_cast<int>(r.report.pipeline_size()); })
      .def_property_readonly("M", [](const PyReport& r) { return static_cast<int>(r.report.microbatches()); })
      .def_property_readonly("N", [](const PyReport& r) { return static_cast<int>(r.report.chunks()); })
      .def_property_readonly("time_unit", [](const PyReport& r) { return r.report.time_unit(); })
      .def_property_readonly("plan", [](const PyReport& r) { return PyPlan{r.sim->config.plan}; },
                             "The plan that ran.")
      .def("explain", &Explain, "Where the step's time goes, term by term (simulate --explain).")
      .def("trace", &Trace, "Every action: stage, kind (F/B), microbatch, chunk, start, end.")
      .def("memory_timeline", &MemoryTimeline, "(stage, time, live bytes) after every change.")
      .def("to_json", [](const PyReport& r) { return tools::MessageToJson(r.report); })
      .def("__repr__", &ReportRepr);

  m.def("_simulate", [](const PyScenario& s, const PyPlan* plan, const std::optional<std::string>& costs,
                        bool baselines) { return Simulate(s, plan, costs, baselines); },
        py::arg("scenario"), py::arg("plan").none(true), py::arg("costs").none(true), py::arg("baselines"));
  m.def("_sweep", [](const PyScenario& s, const std::optional<std::string>& costs, const py::kwargs& kw) {
    return Sweep(s, costs, kw);
  });
  m.def("_capacity", [](const PyScenario& s, std::optional<int> devices, std::optional<long long> seq_len,
                        std::optional<int> global_batch, const std::vector<int>& context_sizes,
                        const std::optional<std::string>& costs, const py::kwargs& kw) {
    return Capacity(s, devices, seq_len, global_batch, context_sizes, costs, kw);
  });
  m.def("_calibrate", &Calibrate);
  m.def("_load_cost_table", &LoadCostTable);
  m.def("_default_scenario_text", [] { return std::string(scenario::DefaultScenarioText()); });
}
