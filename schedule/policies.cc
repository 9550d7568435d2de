// The issue policies: each turns (P, M, N) into per-stage action lists.
#include <algorithm>
#include <string>

#include "schedule/greedy.h"
#include "schedule/policies.h"

namespace stateflow::schedule {
namespace {

Action Make(int stage, Pass pass, int microbatch, int chunk) {
  return Action{.stage = stage, .pass = pass, .microbatch = microbatch, .chunk = chunk};
}

// The k-th forward of a stage: units in (microbatch, chunk) order.
Action KthForward(int stage, int chunks, long long k) {
  return Make(stage, Pass::kForward, static_cast<int>(k / chunks),
              static_cast<int>(k % chunks));
}

// The k-th backward of a stage: microbatch by microbatch, last chunk first.
Action KthBackward(int stage, int chunks, long long k) {
  return Make(stage, Pass::kBackward, static_cast<int>(k / chunks),
              chunks - 1 - static_cast<int>(k % chunks));
}

// `warmup` forwards, then one backward and one forward alternately while
// forwards remain, then the remaining backwards. warmup = M N is GPipe.
std::vector<Action> OneForwardOneBackward(int stage, int microbatches, int chunks,
                                          long long warmup) {
  const long long units = static_cast<long long>(microbatches) * chunks;
  std::vector<Action> actions;
  actions.reserve(2 * units);
  long long forwards = 0;
  long long backwards = 0;
  while (forwards < warmup) actions.push_back(KthForward(stage, chunks, forwards++));
  while (backwards < units) {
    actions.push_back(KthBackward(stage, chunks, backwards++));
    if (forwards < units) actions.push_back(KthForward(stage, chunks, forwards++));
  }
  return actions;
}

// Interleaved 1F1B over chunk units with v model stages per rank, placed
// in a loop (model stage c P + r on rank r): Megatron-Core's virtual
// pipeline order (megatron/core/pipeline_parallel/schedules.py,
// forward_backward_pipelining_with_interleaving, r0.12) with its
// microbatches replaced by units. Forwards go in groups of P units: the
// group's P units on the rank's model stage 0, then on its stage 1, ...,
// stage v - 1, then the next group; backwards likewise from the last model
// stage down, each microbatch's units last chunk first (the boundary-state
// gradient's order). Rank r runs `warmup` forwards, then one backward and
// one forward alternately, then the remaining backwards, where warmup is
// Megatron's 2 (P - r - 1) + (v - 1) P + 1 when N = 1; with N > 1 the
// backward order lags the forward order inside each microbatch, and the
// (v - 1) P becomes the largest lag of the backward sequence behind the
// forward it needs, so that each backward comes after its forward on its
// rank. REQUIRES: M N a multiple of P (Megatron r0.12's rule for its
// microbatches), v >= 2.
std::vector<Action> Interleaved(int rank, int stages, int microbatches, int chunks, int v) {
  const long long units = static_cast<long long>(microbatches) * chunks;
  const long long per_group = static_cast<long long>(stages) * v;
  const long long total = units * v;
  struct Slot {
    int chunk;  // the model stage's index on the rank, 0..v-1
    long long unit;
  };
  const auto forward = [&](long long k) {
    const long long within = k % per_group;
    return Slot{static_cast<int>(within / stages), k / per_group * stages + within % stages};
  };
  const auto backward = [&](long long k) {
    const long long within = k % per_group;
    return Slot{v - 1 - static_cast<int>(within / stages), k / per_group * stages + within % stages};
  };
  // The backward unit u is (a, N - 1 - i) for u = a N + i: forward unit
  // a N + N - 1 - i.
  const auto forward_unit_of = [&](long long backward_unit) {
    const long long a = backward_unit / chunks, i = backward_unit % chunks;
    return a * chunks + (chunks - 1 - i);
  };
  const auto forward_index = [&](int chunk, long long unit) {
    return unit / stages * per_group + static_cast<long long>(chunk) * stages + unit % stages;
  };
  long long lag = 0;
  for (long long j = 0; j < total; ++j) {
    const Slot b = backward(j);
    lag = std::max(lag, forward_index(b.chunk, forward_unit_of(b.unit)) - j);
  }
  const long long warmup = std::min(total, 2LL * (stages - rank - 1) + lag + 1);
  const auto action = [&](Pass pass, const Slot& slot, long long unit) {
    return Make(slot.chunk * stages + rank, pass, static_cast<int>(unit / chunks),
                static_cast<int>(unit % chunks));
  };
  std::vector<Action> actions;
  actions.reserve(2 * total);
  long long forwards = 0, backwards = 0;
  const auto next_forward = [&] {
    const Slot f = forward(forwards++);
    actions.push_back(action(Pass::kForward, f, f.unit));
  };
  const auto next_backward = [&] {
    const Slot b = backward(backwards++);
    actions.push_back(action(Pass::kBackward, b, forward_unit_of(b.unit)));
  };
  while (forwards < warmup) next_forward();
  while (backwards < total) {
    next_backward();
    if (forwards < total) next_forward();
  }
  return actions;
}

// ZB-H1 over chunk units: StateFlow's F and B order (1F1B over the M N
// units, `warmup` forwards first) with each backward split into I (the B
// action) and W, stage r holding back its first r W passes: in the steady
// state one I, then the W of the backward r steps earlier, then one F; in
// the cool-down one I and one W; the held-back W passes at the end. The
// zero-bubble paper's ZB-H1 (Qi et al., ICLR 2024, figure 3) as InternEvo
// runs it (internlm/core/scheduler/pipeline_scheduler_zb.py: the
// WeightGradStore pops a W once the steady step reaches the stage's rank).
// Stage r then holds at most warmup + r units whose W has not run, warmup +
// r = N + P - 1: StateFlow-1F1B's first stage, so the peak is 1F1B's.
std::vector<Action> ZeroBubbleH1(int stage, int microbatches, int chunks, long long warmup) {
  const long long units = static_cast<long long>(microbatches) * chunks;
  std::vector<Action> actions;
  actions.reserve(3 * units);
  long long forwards = 0, backwards = 0, weights = 0, step = 0;
  const auto weight = [&] {
    Action w = KthBackward(stage, chunks, weights++);
    w.pass = Pass::kWeight;
    actions.push_back(w);
  };
  while (forwards < warmup) actions.push_back(KthForward(stage, chunks, forwards++));
  while (backwards < units) {
    actions.push_back(KthBackward(stage, chunks, backwards++));
    if (step++ >= stage) weight();
    if (forwards < units) actions.push_back(KthForward(stage, chunks, forwards++));
  }
  while (weights < units) weight();
  return actions;
}

// ZB-H2 over chunk units, made by the greedy executor (greedy.h) at the
// paper's F = B = W (one unit each): an idle stage runs a ready B first,
// else a ready F while fewer than `limit` of its units wait for their W,
// else its oldest W. With limit = N + 2 (P - 1) (N = 1: the paper's 2P - 1
// microbatches, twice 1F1B's activations) the warm-up runs the extra
// forwards that the paper's ZB-H2 adds and the W passes fill what is left,
// which makes each stage's span bubble-free at F = B = W (tested).
Result<Plan> ZeroBubbleH2(int stages, int microbatches, int chunks) {
  const long long limit = static_cast<long long>(chunks) + 2LL * (stages - 1);
  std::vector<long long> waiting(static_cast<std::size_t>(stages), 0);  // F run, W not
  const ChoosePolicy choose = [&](int r, int, const std::vector<Action>& ready)
      -> Result<std::optional<Action>> {
    long long& held = waiting[static_cast<std::size_t>(r)];
    const Action* forward = nullptr;
    const Action* weight = nullptr;
    for (const Action& a : ready) {
      if (a.pass == Pass::kBackward) return std::optional<Action>(a);
      if (a.pass == Pass::kForward && forward == nullptr) forward = &a;
      if (a.pass == Pass::kWeight && weight == nullptr) weight = &a;
    }
    if (forward != nullptr && held < limit) {
      ++held;
      return std::optional<Action>(*forward);
    }
    if (weight != nullptr) {
      --held;
      return std::optional<Action>(*weight);
    }
    return std::optional<Action>();
  };
  return PlanFromPolicy(stages, microbatches, chunks, choose,
                        {.policy_name = "zb-h2",
                         .forward_time = 1,
                         .backward_time = 1,
                         .split_backward = true,
                         .weight_time = 1});
}

// ZBV over chunk units: the zero-bubble paper's V schedule (Qi et al.,
// ICLR 2024, section 6; torch.distributed.pipelining's ScheduleZBVZeroBubble
// for whole microbatches): v = 2 model stages per stage placed in a V (model
// stages r and 2P - 1 - r on stage r, so the first and the last sit on stage
// 0 and the turn needs no link), every backward split into B and W. Made by
// the greedy executor at F = B = W (one unit each, a model stage's unit
// being half a stage's). An idle stage runs, in this order:
//   - a ready B (its second model stage's first);
//   - a ready F of its second model stage (the one that leads to the loss,
//     and so to the backwards that free memory) while fewer than `limit` of
//     its units wait for their W;
//   - a ready F of its first model stage while fewer than limit - 1 do (the
//     one slot kept free for the second leg is what keeps the V from
//     deadlocking: a stage full of first-leg forwards could never take the
//     second-leg forward its first backward needs);
//   - its oldest W.
// limit = 2 (N + P - 1) model-stage units is StateFlow-1F1B's first stage's
// N + P - 1 whole-stage units: the paper's ZBV holds 1F1B's activations, and
// so does this one, on every stage (tested, with its step at F = B = W).
Result<Plan> ZeroBubbleV(int stages, int microbatches, int chunks) {
  const long long limit = 2LL * (static_cast<long long>(chunks) + stages - 1);
  std::vector<long long> waiting(static_cast<std::size_t>(stages), 0);  // F run, W not
  const ChoosePolicy choose = [&](int r, int, const std::vector<Action>& ready)
      -> Result<std::optional<Action>> {
    long long& held = waiting[static_cast<std::size_t>(r)];
    const Action* first_leg = nullptr;
    const Action* weight = nullptr;
    for (const Action& a : ready) {
      if (a.pass == Pass::kBackward) return std::optional<Action>(a);
      if (a.pass == Pass::kForward && a.stage >= stages && held < limit) {  // the V's second leg
        ++held;
        return std::optional<Action>(a);
      }
      if (a.pass == Pass::kForward && first_leg == nullptr) first_leg = &a;
      if (a.pass == Pass::kWeight && weight == nullptr) weight = &a;
    }
    if (first_leg != nullptr && held + 1 < limit) {
      ++held;
      return std::optional<Action>(*first_leg);
    }
    if (weight != nullptr) {
      --held;
      return std::optional<Action>(*weight);
    }
    return std::optional<Action>();
  };
  return PlanFromPolicy(stages, microbatches, chunks, choose,
                        {.policy_name = "zbv",
                         .forward_time = 1,
                         .backward_time = 1,
                         .split_backward = true,
                         .weight_time = 1,
                         .virtual_stages = 2,
                         .placement = StagePlacement::kVShape});
}

// Interleaved zero bubble over chunk units: virtual stages in a loop (model
// stage s on stage s mod P, v of them per stage, as policy interleaved and
// Megatron-Core's virtual pipeline place them) with every backward split
// into B and W (torch.distributed.pipelining's ScheduleInterleavedZeroBubble
// for whole microbatches; the zero-bubble paper's idea, section 3, on the
// interleaved layout). Made by the greedy executor at F = B = W (one unit
// each, a model stage's unit being 1/v of a stage's). An idle stage runs,
// in this order:
//   - a ready B (the deepest model stage's first: the ready list's order);
//   - a ready F of its model stage k (k = 0 the first in layer order) while
//     fewer than limit - (v - 1 - k) of its units wait for their W, the
//     deepest such F first: each shallower leg leaves one more slot free
//     for the legs after it, as zbv's first leg leaves one for its second
//     (without it a stage full of first-leg forwards could never take the
//     deeper forward its first backward needs);
//   - its oldest W.
// limit = v (N + P - 1) model-stage units is StateFlow-1F1B's first stage's
// N + P - 1 whole-stage units (zbv's limit at v = 2): this schedule holds
// 1F1B's activations where policy interleaved holds more (Megatron's
// warm-up, (v - 1) P + 2 (P - 1) + 1 microbatch units at N = 1).
Result<Plan> InterleavedZeroBubble(int stages, int microbatches, int chunks, int v) {
  const long long limit = static_cast<long long>(v) * (static_cast<long long>(chunks) + stages - 1);
  std::vector<long long> waiting(static_cast<std::size_t>(stages), 0);  // F run, W not
  const ChoosePolicy choose = [&](int r, int, const std::vector<Action>& ready)
      -> Result<std::optional<Action>> {
    long long& held = waiting[static_cast<std::size_t>(r)];
    const Action* weight = nullptr;
    for (const Action& a : ready) {
      if (a.pass == Pass::kBackward) return std::optional<Action>(a);
      if (a.pass == Pass::kForward && held + (v - 1 - a.stage / stages) < limit) {
        ++held;
        return std::optional<Action>(a);
      }
      if (a.pass == Pass::kWeight && weight == nullptr) weight = &a;
    }
    if (weight != nullptr) {
      --held;
      return std::optional<Action>(*weight);
    }
    return std::optional<Action>();
  };
  return PlanFromPolicy(stages, microbatches, chunks, choose,
                        {.policy_name = "zb-interleaved",
                         .forward_time = 1,
                         .backward_time = 1,
                         .split_backward = true,
                         .weight_time = 1,
                         .virtual_stages = v,
                         .placement = StagePlacement::kLoop});
}

std::string KnownPolicies() {
  std::string known;
  for (const std::string& name : PolicyNames()) {
    if (!known.empty()) known += ", ";
    known += name;
  }
  return known;
}

}  // namespace

Status CheckPlanDimensions(int stages, int microbatches, int chunks) {
  if (stages < 1) {
    return Status::Invalid("stages (parallel.pipeline_size) must be >= 1, got " +
                           std::to_string(stages));
  }
  if (microbatches < 1) {
    return Status::Invalid("microbatches (parallel.microbatches) must be >= 1, got " +
                           std::to_string(microbatches));
  }
  if (chunks < 1) {
    return Status::Invalid("chunks (schedule.chunks) must be >= 1, got " + std::to_string(chunks));
  }
  const long long units = static_cast<long long>(microbatches) * chunks;
  if (units > kMaxUnitsPerStage) {
    return Status::Invalid("microbatches * chunks (parallel.microbatches * schedule.chunks) = " +
                           std::to_string(units) + " exceeds the limit " +
                           std::to_string(kMaxUnitsPerStage));
  }
  return Status::Ok();
}


const std::vector<std::string>& PolicyNames() {
  static const std::vector<std::string> kNames = {"gpipe", "1f1b", "stateflow", "interleaved",
                                                  "zb-h1", "zb-h2", "zbv", "zb-interleaved"};
  return kNames;
}

int StateflowWarmupForwards(int stages, int microbatches, int chunks, int stage) {
  const long long units = static_cast<long long>(microbatches) * chunks;
  const long long pipeline = static_cast<long long>(chunks) + stages - stage - 1;
  return static_cast<int>(std::min(units, pipeline));
}

bool WholeSequencePolicy(std::string_view policy) { return policy == "1f1b"; }

int DefaultVirtualStages(std::string_view policy) {
  return policy == "zbv" || policy == "zb-interleaved" ? 2 : 1;
}

StagePlacement PolicyPlacement(std::string_view policy) {
  return policy == "zbv" ? StagePlacement::kVShape : StagePlacement::kLoop;
}

bool VirtualStagesFree(std::string_view policy) {
  return policy == "interleaved" || policy == "zb-interleaved";
}

std::optional<long long> ChunksFor(std::string_view policy, std::optional<long long> requested) {
  if (!requested && WholeSequencePolicy(policy)) return 1;
  return requested;
}

Status CheckPolicyChunks(std::string_view policy, long long chunks, std::string_view field) {
  if (!WholeSequencePolicy(policy) || chunks == 1) return Status::Ok();
  return Status::Invalid(std::string(field) + " must be 1 for policy " + std::string(policy) +
                         " (whole-sequence microbatches), got " + std::to_string(chunks) +
                         "; policy stateflow runs 1F1B over chunks");
}

Result<Plan> MakePlan(std::string_view policy, int stages, int microbatches, int chunks,
                      int virtual_stages) {
  const bool gpipe = policy == "gpipe";
  const bool one_f_one_b = WholeSequencePolicy(policy);
  const bool interleaved = policy == "interleaved";
  const bool zb_h1 = policy == "zb-h1", zb_h2 = policy == "zb-h2", zbv = policy == "zbv";
  const bool zb_interleaved = policy == "zb-interleaved";
  if (!gpipe && !one_f_one_b && !interleaved && !zb_h1 && !zb_h2 && !zbv && !zb_interleaved &&
      policy != "stateflow") {
    return Status::Invalid("schedule.policy '" + std::string(policy) +
                           "' is unknown (known: " + KnownPolicies() + ")");
  }
  SF_RETURN_IF_ERROR(CheckPlanDimensions(stages, microbatches, chunks));
  SF_RETURN_IF_ERROR(CheckPolicyChunks(policy, chunks, "schedule.chunks"));
  if (virtual_stages < 1) {
    return Status::Invalid("schedule.virtual_stages must be >= 1, got " +
                           std::to_string(virtual_stages));
  }
  if (zbv) {
    if (virtual_stages != 2) {
      return Status::Invalid("schedule.virtual_stages must be 2 for policy zbv (its V places "
                             "two model stages on each stage), got " +
                             std::to_string(virtual_stages));
    }
    if (static_cast<long long>(microbatches) * chunks * 2 > kMaxUnitsPerStage) {
      return Status::Invalid("microbatches * chunks * virtual_stages = " +
                             std::to_string(static_cast<long long>(microbatches) * chunks * 2) +
                             " exceeds the limit " + std::to_string(kMaxUnitsPerStage));
    }
    return ZeroBubbleV(stages, microbatches, chunks);
  }
  if (virtual_stages > 1 && !VirtualStagesFree(policy)) {
    return Status::Invalid("schedule.virtual_stages must be 1 for policy " + std::string(policy) +
                           ", got " + std::to_string(virtual_stages) +
                           " (policies interleaved, zb-interleaved and zbv place virtual stages)");
  }
  const long long units = static_cast<long long>(microbatches) * chunks;
  if (zb_interleaved) {
    if (units * virtual_stages > kMaxUnitsPerStage) {
      return Status::Invalid("microbatches * chunks * virtual_stages = " +
                             std::to_string(units * virtual_stages) + " exceeds the limit " +
                             std::to_string(kMaxUnitsPerStage));
    }
    return InterleavedZeroBubble(stages, microbatches, chunks, virtual_stages);
  }
  if (virtual_stages > 1) {
    if (units % stages != 0) {
      return Status::Invalid(
          "policy interleaved needs parallel.microbatches * schedule.chunks (" +
          std::to_string(units) + ") to be a multiple of parallel.pipeline_size (" +
          std::to_string(stages) + "), as Megatron-Core's interleaved schedule needs for "
          "its microbatches");
    }
    if (units * virtual_stages > kMaxUnitsPerStage) {
      return Status::Invalid("microbatches * chunks * virtual_stages = " +
                             std::to_string(units * virtual_stages) + " exceeds the limit " +
                             std::to_string(kMaxUnitsPerStage));
    }
    std::vector<std::vector<Action>> per_stage(stages);
    for (int r = 0; r < stages; ++r) {
      per_stage[r] = Interleaved(r, stages, microbatches, chunks, virtual_stages);
    }
    return Plan(std::string(policy), stages, microbatches, chunks, std::move(per_stage),
                virtual_stages, StagePlacement::kLoop);
  }
  if (zb_h2) return ZeroBubbleH2(stages, microbatches, chunks);
  std::vector<std::vector<Action>> per_stage(stages);
  for (int r = 0; r < stages; ++r) {
    const long long warmup =
        gpipe ? units : StateflowWarmupForwards(stages, microbatches, chunks, r);
    per_stage[r] = zb_h1 ? ZeroBubbleH1(r, microbatches, chunks, warmup)
                         : OneForwardOneBackward(r, microbatches, chunks, warmup);
  }
  return Plan(std::string(policy), stages, microbatches, chunks, std::move(per_stage));
}

}  // namespace stateflow::schedule
