#!/usr/bin/env bash
# make bench: runs every bench/<area>/run.sh (side-by-side comparisons with
# the peer named in each; results are printed and summarised by hand in
# bench/README.md). BENCH=area runs one area.
set -u
cd "$(dirname "$0")/.."
export BUILD=${BUILD:-build} KEEL="$PWD/${BUILD:-build}/keel"
rc=0
for r in bench/*/run.sh; do
  area=$(basename "$(dirname "$r")")
  [ -n "${BENCH:-}" ] && [ "$BENCH" != "$area" ] && continue
  echo "=== bench/$area"
  bash "$r" || { echo "bench/$area failed"; rc=1; }
done
exit $rc
