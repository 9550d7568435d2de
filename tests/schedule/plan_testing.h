// Test helpers for plans: a random generator of valid plans (a random legal
// execution of all actions), random mutations, and an independent
// brute-force checker that the model-based tests compare ValidatePlan with.
// Not for production use: everything here is quadratic or worse on purpose,
// for plans of a few hundred actions.
//
//   std::mt19937 rng(7);
//   Plan plan = RandomValidPlan(3, 2, 2, /*with_weight=*/false, rng);
//   EXPECT_TRUE(BruteForceValid(plan));
#pragma once

#include <map>
#include <random>
#include <string>
#include <vector>

#include "schedule/plan.h"
#include "schedule/validator.h"

namespace stateflow::schedule::testing {

// All actions of (P, M, N), F and B (and W when with_weight) of every unit.
inline std::vector<Action> AllActions(int stages, int microbatches, int chunks,
                                      bool with_weight) {
  std::vector<Action> all;
  const int passes = with_weight ? 3 : 2;
  for (int r = 0; r < stages; ++r)
    for (int a = 0; a < microbatches; ++a)
      for (int i = 0; i < chunks; ++i)
        for (int p = 0; p < passes; ++p)
          all.push_back(Action{.stage = r, .pass = static_cast<Pass>(p), .microbatch = a,
                               .chunk = i});
  return all;
}

// Every action x must follow, written straight from the rules in plan.h.
inline std::vector<Action> Prerequisites(const Action& x, int stages, int chunks) {
  auto edited = [&x](auto edit) {
    Action d = x;
    edit(d);
    return d;
  };
  std::vector<Action> deps;
  if (x.pass == Pass::kForward) {
    if (x.stage > 0) deps.push_back(edited([](Action& d) { --d.stage; }));  // rule 1
    if (x.chunk > 0) deps.push_back(edited([](Action& d) { --d.chunk; }));  // rule 2
  } else if (x.pass == Pass::kBackward) {
    deps.push_back(edited([](Action& d) { d.pass = Pass::kForward; }));     // rule 3
    if (x.stage + 1 < stages) deps.push_back(edited([](Action& d) { ++d.stage; }));  // rule 4
    if (x.chunk + 1 < chunks) deps.push_back(edited([](Action& d) { ++d.chunk; }));  // rule 5
  } else {
    deps.push_back(edited([](Action& d) { d.pass = Pass::kBackward; }));    // B < W
  }
  return deps;
}

// A valid plan drawn at random: repeatedly run a uniformly chosen action
// whose prerequisites have all run, appending it to its stage's list.
inline Plan RandomValidPlan(int stages, int microbatches, int chunks, bool with_weight,
                            std::mt19937& rng) {
  std::vector<Action> pending = AllActions(stages, microbatches, chunks, with_weight);
  std::map<Action, bool> done;
  std::vector<std::vector<Action>> per_stage(stages);
  while (!pending.empty()) {
    std::vector<std::size_t> ready;
    for (std::size_t k = 0; k < pending.size(); ++k) {
      bool ok = true;
      for (const Action& d : Prerequisites(pending[k], stages, chunks)) ok = ok && done[d];
      if (ok) ready.push_back(k);
    }
    const std::size_t pick =
        ready[std::uniform_int_distribution<std::size_t>(0, ready.size() - 1)(rng)];
    const Action x = pending[pick];
    done[x] = true;
    per_stage[x.stage].push_back(x);
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  return Plan("random", stages, microbatches, chunks, std::move(per_stage));
}

// True iff every stage holds each of its actions exactly once (W for all
// units or for none) and the stages, each running its list in order, can
// all finish. The second part is decided by earliest start times: time(x) =
// max(time(previous on its stage), time(each prerequisite)) + 1, relaxed
// over all actions until nothing changes; a cycle keeps growing, so more
// rounds than actions means no schedule exists.
inline bool BruteForceValid(const Plan& plan) {
  const int P = plan.stages(), M = plan.microbatches(), N = plan.chunks();
  if (P < 1 || M < 1 || N < 1 || static_cast<int>(plan.per_stage().size()) != P) return false;
  std::map<Action, int> count;
  std::map<Action, std::pair<int, int>> where;  // action -> (stage, step)
  bool has_weight = false;
  for (int r = 0; r < P; ++r) {
    for (int k = 0; k < static_cast<int>(plan.stage(r).size()); ++k) {
      const Action& x = plan.stage(r)[k];
      if (x.stage != r) return false;
      ++count[x];
      where[x] = {r, k};
      has_weight = has_weight || x.pass == Pass::kWeight;
    }
  }
  const std::vector<Action> all = AllActions(P, M, N, has_weight);
  if (count.size() != all.size()) return false;
  for (const Action& x : all) {
    if (count[x] != 1) return false;
  }
  std::map<Action, long long> time;
  const long long rounds = static_cast<long long>(all.size()) + 2;
  for (long long round = 0; round < rounds; ++round) {
    bool changed = false;
    for (int r = 0; r < P; ++r) {
      for (std::size_t k = 0; k < plan.stage(r).size(); ++k) {
        const Action& x = plan.stage(r)[k];
        long long t = k > 0 ? time[plan.stage(r)[k - 1]] + 1 : 0;
        for (const Action& d : Prerequisites(x, P, N)) t = std::max(t, time[d] + 1);
        if (t != time[x]) {
          time[x] = t;
          changed = true;
        }
      }
    }
    if (!changed) return true;
  }
  return false;
}

// One random edit of a plan: swap two actions of a stage, move one, delete
// one, repeat one, change one's microbatch or chunk, or swap two actions of
// different stages. The result may or may not be valid.
inline Plan Mutate(const Plan& plan, std::mt19937& rng) {
  std::vector<std::vector<Action>> lists = plan.per_stage();
  auto uniform = [&](std::size_t n) {
    return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
  };
  const std::size_t r = uniform(lists.size());
  std::vector<Action>& list = lists[r];
  if (list.empty()) return plan;
  const std::size_t k = uniform(list.size());
  const std::size_t j = uniform(list.size());
  switch (uniform(6)) {
    case 0:
      std::swap(list[k], list[j]);
      break;
    case 1: {
      const Action x = list[k];
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(k));
      list.insert(list.begin() + static_cast<std::ptrdiff_t>(std::min(j, list.size())), x);
      break;
    }
    case 2:
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(k));
      break;
    case 3:
      list.insert(list.begin() + static_cast<std::ptrdiff_t>(j), list[k]);
      break;
    case 4:
      if (uniform(2) == 0) {
        list[k].microbatch = static_cast<int>(uniform(plan.microbatches()));
      } else {
        list[k].chunk = static_cast<int>(uniform(plan.chunks()));
      }
      break;
    default: {
      std::vector<Action>& other = lists[uniform(lists.size())];
      if (!other.empty()) std::swap(list[k], other[uniform(other.size())]);
      break;
    }
  }
  return Plan(plan.policy(), plan.stages(), plan.microbatches(), plan.chunks(),
              std::move(lists));
}

// Passes of a stage's list as a string such as "FFBFBB".
inline std::string PassPattern(const std::vector<Action>& actions) {
  std::string pattern;
  for (const Action& x : actions) pattern += PassLetter(x.pass);
  return pattern;
}

// A description of a case for failure messages.
inline std::string Describe(const std::string& policy, int P, int M, int N) {
  return policy + " P=" + std::to_string(P) + " M=" + std::to_string(M) +
         " N=" + std::to_string(N);
}

}  // namespace stateflow::schedule::testing
