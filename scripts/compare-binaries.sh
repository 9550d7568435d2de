#!/usr/bin/env bash
# Two builds of stateflow side by side on the same training run, alternating
# A B A B ... so that the machine's load falls on both alike: the median step
# time of each (the report's step_time_s: mean of the steps after the first)
# and the ratio B / A. Used for "the backend's speed before and after a
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
import json, statistics, subprocess, sys
a, b, pairs, args = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
times = {a: [], b: []}
for _ in range(pairs):
    for binary in (a, b):
        out = subprocess.run([binary, "train", *args, "--json"], check=True,
                             capture_output=True, text=True).stdout
        times[binary].append(json.loads(out)["step_time_s"])
ma, mb = statistics.median(times[a]), statistics.median(times[b])
print(f"train {' '.join(args)}: {pairs} runs each, alternating")
print(f"  A {a}: median step {ma * 1e3:.2f} ms (min {min(times[a]) * 1e3:.2f})")
print(f"  B {b}: median step {mb * 1e3:.2f} ms (min {min(times[b]) * 1e3:.2f})")
print(f"  B / A = {mb / ma:.3f} (median), {min(times[b]) / min(times[a]):.3f} (min)")
PY
