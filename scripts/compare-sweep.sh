#!/usr/bin/env bash
# Runs `stateflow sweep` over every scenario of scenarios/paper/ with two
# binaries (e.g. one built before a change and one after) and checks that
# their outputs are byte-identical: the CSV file as written, and the JSON
# report with only the fields that name the run itself masked (elapsed_s,
# and the provenance's git_commit and timestamp). Exit 0 if every file
# matches, 1 (with a diff) if one does not, 2 on bad usage.
#
#   scripts/compare-sweep.sh OLD_BIN NEW_BIN [SCENARIO_DIR]
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 OLD_BIN NEW_BIN [SCENARIO_DIR (default: scenarios/paper)]" >&2
  exit 2
fi
old_bin=$1
new_bin=$2
dir=${3:-"$(dirname "$0")/../scenarios/paper"}
for bin in "$old_bin" "$new_bin"; do
  if [ ! -x "$bin" ]; then
    echo "$0: '$bin' is not an executable" >&2
    exit 2
  fi
done
shopt -s nullglob
scenarios=("$dir"/*.textproto)
if [ ${#scenarios[@]} -eq 0 ]; then
  echo "$0: no .textproto files in '$dir'" >&2
  exit 2
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The JSON without what differs between any two runs of the same binary.
mask() {
  sed -E -e 's/("elapsed_s": )[^,]*/\1X/' -e 's/("(git_commit|timestamp)": )"[^"]*"/\1"X"/' "$1"
}

status=0
for f in "${scenarios[@]}"; do
  name=$(basename "$f" .textproto)
  for side in old new; do
    bin=$old_bin
    [ "$side" = new ] && bin=$new_bin
    "$bin" sweep --scenario "$f" --json --csv "$out/$name.$side.csv" > "$out/$name.$side.json"
    mask "$out/$name.$side.json" > "$out/$name.$side.masked.json"
  done
  if ! cmp -s "$out/$name.old.csv" "$out/$name.new.csv"; then
    echo "DIFFER: $name CSV"
    diff "$out/$name.old.csv" "$out/$name.new.csv" | head -20
    status=1
  elif ! cmp -s "$out/$name.old.masked.json" "$out/$name.new.masked.json"; then
    echo "DIFFER: $name JSON"
    diff "$out/$name.old.masked.json" "$out/$name.new.masked.json" | head -20
    status=1
  else
    echo "same:   $name ($(($(wc -l < "$out/$name.new.csv") - 1)) CSV rows)"
  fi
done
if [ $status -eq 0 ]; then
  echo "all ${#scenarios[@]} scenarios byte-identical (CSV; JSON apart from elapsed_s, git_commit, timestamp)"
fi
exit $status
