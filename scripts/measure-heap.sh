#!/usr/bin/env bash
# Host memory kept in the heap (docs/performance.md): two stateflow binaries
# side by side, alternating, `repeats` times each: the default scenario's
# training step (gdn-tiny, T = 1024, M = 8, N = 4, float32) in one process
# and under mpirun -n 2, and profile's forward and backward of one GDN layer
# on a chunk of 256 tokens. Prints one Markdown row per binary and quantity:
# the median over the repeats.
#
#   scripts/measure-heap.sh BEFORE/stateflow AFTER/stateflow [repeats]   # default 5
set -eu
before=$1
after=$2
repeats=${3:-5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for k in $(seq "$repeats"); do
  for which in before after; do
    bin=$before
    [ "$which" = after ] && bin=$after
    "$bin" train -P 1 -T 1024 -M 8 --steps 6 --json >"$out/$which-p1-$k.json"
    mpirun -n 2 --oversubscribe "$bin" train -T 1024 -M 8 --steps 6 --json >"$out/$which-p2-$k.json"
    "$bin" profile -T 1024 -M 8 --out "$out/$which-profile-$k.textproto" >/dev/null
  done
done
python3 - "$out" "$repeats" <<'PY'
import json, re, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
def step(which, p):
    return statistics.median(json.load(open("%s/%s-%s-%d.json" % (out, which, p, k)))["step_time_s"]
                             for k in range(1, repeats + 1))
def layer(which, pass_):
    times = []
    for k in range(1, repeats + 1):
        text = open("%s/%s-profile-%d.textproto" % (out, which, k)).read()
        for block in re.findall(r"samples \{(.*?)\n\}", text, re.S):
            if 'layer_kind: "recurrence"' in block and 'pass: "%s"' % pass_ in block:
                times.append(float(re.search(r"median_s: ([\d.e+-]+)", block).group(1)))
    return statistics.median(times)
print("| quantity | before | after | after / before |")
print("| --- | ---: | ---: | ---: |")
for name, f in [("train step, P 1 (ms)", lambda w: 1e3 * step(w, "p1")),
                ("train step, P 2 under mpirun (ms)", lambda w: 1e3 * step(w, "p2")),
                ("profile: GDN layer forward, 256 tokens (ms)", lambda w: 1e3 * layer(w, "forward")),
                ("profile: GDN layer backward, 256 tokens (ms)", lambda w: 1e3 * layer(w, "backward"))]:
    b, a = f("before"), f("after")
    print("| %s | %.2f | %.2f | %.2f |" % (name, b, a, a / b))
PY
