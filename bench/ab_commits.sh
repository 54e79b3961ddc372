#!/usr/bin/env bash
# Ours at two commits, alternating, on one bench dataset: what one change costs.
#   bench/ab_commits.sh BEFORE_DIR AFTER_DIR MANIFEST [ROUNDS]
# BEFORE_DIR and AFTER_DIR are checkouts (e.g. `git worktree add /tmp/before REV`); both
# run with this checkout's .venv. Prints wall and CPU seconds and peak RSS per run.
set -euo pipefail
before=$1 after=$2 manifest=$3 rounds=${4:-5}
python=$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python
out=$(mktemp -d)
for round in $(seq "$rounds"); do
  for side in before after; do
    dir=$([ "$side" = before ] && echo "$before" || echo "$after")
    (cd "$dir" && /usr/bin/time -f "$side round $round: wall %e s, user %U s, sys %S s, max RSS %M KB" \
       env PYTHONPATH="$dir" "$python" -m image_tfrecords --manifest "$manifest" \
       --output_dir "$out/$side" --overwrite --quiet > /dev/null 2> "$out/$side.err" \
     || { cat "$out/$side.err"; exit 1; }; tail -1 "$out/$side.err")
  done
done
rm -rf "$out"
