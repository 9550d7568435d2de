#!/usr/bin/env bash
# Two builds of stateflow side by side on the same training run, alternating
# A B A B ... so that the machine's load falls on both alike: the median step
# time of each (the report's step_time_s: mean of the steps after the first),
# the median CPU time of each whole process (user + system: less sensitive
# to other work on a shared machine than wall time, with --threads 1), and
# the ratios B / A. Used for "the backend's speed before and after a
# change" (docs/performance.md).
#
#   scripts/compare-binaries.sh OLD_BINARY NEW_BINARY [pairs] [train args...]
#   scripts/compare-binaries.sh /tmp/old/stateflow build/stateflow 10 --model gdn-small -T 1024
set -euo pipefail
a=$1 b=$2 pairs=${3:-10}
shift 3 || shift $#
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--model gdn-small -T 1024 --steps 4 --threads 1)
python3 - "$a" "$b" "$pairs" "${args[@]}" <<'PY'
import json, resource, statistics, subprocess, sys
a, b, pairs, args = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
times = {a: [], b: []}
cpu = {a: [], b: []}
def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
for _ in range(pairs):
    for binary in (a, b):
        before = children_cpu()
        out = subprocess.run([binary, "train", *args, "--json"], check=True,
                             capture_output=True, text=True).stdout
        cpu[binary].append(children_cpu() - before)
        times[binary].append(json.loads(out)["step_time_s"])
med = statistics.median
print(f"train {' '.join(args)}: {pairs} runs each, alternating")
for name, binary in (("A", a), ("B", b)):
    print(f"  {name} {binary}: median step {med(times[binary]) * 1e3:.2f} ms "
          f"(min {min(times[binary]) * 1e3:.2f}), median process CPU {med(cpu[binary]):.3f} s")
print(f"  B / A: step {med(times[b]) / med(times[a]):.3f} (median), "
      f"{min(times[b]) / min(times[a]):.3f} (min); process CPU {med(cpu[b]) / med(cpu[a]):.3f}")
PY
