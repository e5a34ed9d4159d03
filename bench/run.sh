#!/usr/bin/env bash
# make bench: runs every bench/<area>/run.sh (side-by-side comparisons with
# the peer named in each). Each area's output is kept in $BUILD/bench/<area>.out;
# tools/bench_table.py then updates the area's result records
# (bench/results/*.json) from it and renders the table of current results at
# the top of bench/README.md. BENCH=area runs one area.
set -u
cd "$(dirname "$0")/.."
export BUILD=${BUILD:-build} KEEL="$PWD/${BUILD:-build}/keel"
rc=0
for r in bench/*/run.sh; do
  area=$(basename "$(dirname "$r")")
  [ -n "${BENCH:-}" ] && [ "$BENCH" != "$area" ] && continue
  echo "=== bench/$area"
  mkdir -p "$BUILD/bench"
  out="$BUILD/bench/$area.out"
  bash "$r" 2>&1 | tee "$out"
  if [ "${PIPESTATUS[0]}" -ne 0 ]; then echo "bench/$area failed"; rc=1; continue; fi
  /usr/bin/python3 tools/bench_table.py update "$area" "$out" || rc=1
done
/usr/bin/python3 tools/bench_table.py render || rc=1
exit $rc
