#!/usr/bin/env python3
"""Issue policies written in Python, beside StateFlow-1F1B, on a paper scenario.

Two policies, each a function choose(stage, ready) -> action text or None
(wait), run by the schedule core's greedy executor and costed by the
simulator like any other plan:

- "stateflow-in-python": StateFlow's 1F1B over chunk units in ten lines
  (its warm-up depth N + P - r - 1, then one backward and one forward); its
  plan is the built-in one action for action, so its numbers are the same.
- "eager-backward+k": an idle stage runs a ready backward if it has one,
  else a ready forward unless N + P - r - 1 + k chunks already hold
  activations on it. Greedy and simple; the table shows what it costs.

    PYTHONPATH=build/python python3 examples/custom_policy.py
"""
import argparse
import os

import stateflow as sf


def stateflow_in_python(P, M, N):
    nf, nb, last = [0] * P, [0] * P, [None] * P

    def choose(stage, ready):
        if nf[stage] < min(M * N, N + P - stage - 1) or (nf[stage] < M * N and last[stage] == "B"):
            want = "%dF%d.%d" % (stage, nf[stage] // N, nf[stage] % N)
        else:
            want = "%dB%d.%d" % (stage, nb[stage] // N, N - 1 - nb[stage] % N)
        if want not in ready:
            return None  # wait for it
        last[stage] = "F" if "F" in want else "B"
        (nf if last[stage] == "F" else nb)[stage] += 1
        return want

    return choose


def eager_backward(P, N, extra=0):
    in_flight = [0] * P

    def choose(stage, ready):
        backward = [a for a in ready if "B" in a]
        if backward:
            in_flight[stage] -= 1
            return backward[0]
        if in_flight[stage] < N + P - stage - 1 + extra:
            in_flight[stage] += 1
            return next(a for a in ready if "F" in a)
        return None  # wait: the cap is reached

    return choose


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="also write the plans' text here")
    args = parser.parse_args()
    s = sf.load_scenario(os.path.join(os.path.dirname(__file__), "..", "scenarios", "paper",
                                      "gdn-3b.textproto")).with_(N=8, policy="stateflow")
    P, M, N = s.P, s.M, s.N
    print("%s, T=%d, P=%d M=%d N=%d on %s (analytic predictions)" % (s.model, s.T, P, M, N,
                                                                    s.cluster))
    reference = sf.simulate(s, baselines=False)
    rows = [("stateflow (built in)", reference)]
    policies = [("stateflow-in-python", stateflow_in_python(P, M, N))]
    policies += [("eager-backward+%d" % k, eager_backward(P, N, k)) for k in (0, 2)]
    for name, choose in policies:
        plan = sf.plan_from_policy(choose, P, M, N, name=name)
        if name == "stateflow-in-python":
            assert plan.per_stage() == reference.plan.per_stage(), "not the built-in plan"
        rows.append((plan.policy, sf.simulate(s, plan=plan)))
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, plan.policy + ".plan.txt"), "w") as f:
                f.write(plan.text())
    print("%-22s %12s %12s %8s %10s" % ("schedule", "step s", "tokens/s", "bubble", "peak GiB"))
    for name, r in rows:
        print("%-22s %12.4f %12.0f %8.4f %10.2f" % (name, r.step_time_s, r.throughput_tokens_per_s,
                                                   r.bubble_fraction, max(r.peak_bytes) / 2**30))


if __name__ == "__main__":
    main()
