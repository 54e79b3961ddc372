#!/usr/bin/env bash
# Ours at two commits, alternating, on one bench dataset: what one change costs.
#   bench/ab_commits.sh BEFORE_DIR AFTER_DIR MANIFEST [ROUNDS]
#   AB_REUSE=DAY1_MANIFEST bench/ab_commits.sh ...   (a daily run: see below)
# BEFORE_DIR and AFTER_DIR are checkouts (e.g. `git worktree add /tmp/before REV`); both
# run with this checkout's .venv. Prints wall and CPU seconds and peak RSS per run.
# With AB_REUSE, each side first converts DAY1_MANIFEST once, untimed, and every timed run
# reuses its own side's day-1 output (--reuse_from): what a change costs a daily run (an
# output's example index is read by the code that wrote it).
#
# Each checkout runs laid out as the wheel installs it (image_tfrecords/ with its core/,
# pipeline/ and transforms/ inside, as links in a temp folder first on PYTHONPATH): .venv's
# editable install maps those subpackages to this checkout's folders, so with a plain
# PYTHONPATH both sides ran this checkout's code (until issue 53). A checkout from before
# the one package (no image_tfrecords/__main__.py) runs as `python -m pipeline`.
# PYTHONSAFEPATH: the folder a process runs in (the checkout) is not put first on sys.path,
# in the worker processes either. Each run writes a fresh folder: --overwrite would reuse
# the last run's examples (--reuse_from's default).
set -euo pipefail
before=$(cd "$1" && pwd) after=$(cd "$2" && pwd) manifest=$3 rounds=${4:-5}
python=$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for side in before after; do
  dir=$([ "$side" = before ] && echo "$before" || echo "$after")
  if [ -f "$dir/image_tfrecords/__main__.py" ]; then
    mkdir -p "$out/$side-code/image_tfrecords"
    ln -s "$dir"/image_tfrecords/* "$out/$side-code/image_tfrecords/"
    for package in core pipeline transforms; do
      ln -s "$dir/$package" "$out/$side-code/image_tfrecords/$package"
    done
    echo "$out/$side-code image_tfrecords" > "$out/$side.how"
  else
    echo "$dir pipeline" > "$out/$side.how"
  fi
done
for side in before after; do
  : > "$out/$side.flags"
  [ -n "${AB_REUSE:-}" ] || continue
  dir=$([ "$side" = before ] && echo "$before" || echo "$after")
  read -r code module < "$out/$side.how"
  (cd "$dir" && env PYTHONPATH="$code" PYTHONSAFEPATH=1 "$python" -m "$module" \
     --manifest "$AB_REUSE" --output_dir "$out/$side-day1" --quiet > /dev/null 2> "$out/$side.err" \
   || { cat "$out/$side.err"; exit 1; })
  echo "--reuse_from $out/$side-day1" > "$out/$side.flags"
done
for round in $(seq "$rounds"); do
  for side in before after; do
    dir=$([ "$side" = before ] && echo "$before" || echo "$after")
    read -r code module < "$out/$side.how"
    read -r -a flags < "$out/$side.flags" || true
    (cd "$dir" && /usr/bin/time -f "$side round $round: wall %e s, user %U s, sys %S s, max RSS %M KB" \
       env PYTHONPATH="$code" PYTHONSAFEPATH=1 "$python" -m "$module" --manifest "$manifest" \
       --output_dir "$out/$side-$round" --quiet "${flags[@]}" > /dev/null 2> "$out/$side.err" \
     || { cat "$out/$side.err"; exit 1; }; tail -1 "$out/$side.err")
  done
done
