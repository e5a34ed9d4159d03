#!/usr/bin/env bash
# Tracking benchmarks (issue 7 goals):
#  1. 1,000,000 metric points through the batch API (goal <= 5 s)
#  2. `keel runs list --filter ...` over 10,000 runs x 50 metrics (goal <= 100 ms, median of 7)
#  3. 4 processes logging concurrently for 30 s: zero lock errors, zero lost points
# TRACK_BENCH_SECONDS overrides the 30 s of (3).
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
KEEL="$PWD/$BUILD/keel"
mkdir -p "$BUILD/bench"
gcc -O2 -std=c11 -D_GNU_SOURCE -pthread -Iinclude bench/track/track_bench.c "$BUILD/libkeel.a" \
  $(pkg-config --libs sqlite3 libpq libcrypto yaml-0.1 libcjson) -lm -o "$BUILD/bench/track_bench"
W=$(mktemp -d "${TMPDIR:-/tmp}/keel-track-bench-XXXXXX")
trap 'rm -rf "$W"' EXIT
median() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }

echo "--- 1. log 1,000,000 points (batch API)"
for batch in 1000 10000; do
  for keys in 1 10; do
    rm -rf "$W/log"
    "$BUILD/bench/track_bench" log "$W/log" 1000000 $batch $keys
  done
done

echo "--- 2. runs list with a filter over 10,000 runs x 50 metrics"
"$BUILD/bench/track_bench" gen "$W/list" 10000 50 2
ls -l "$W/list/keel.db" | awk '{print "store size " $5 " bytes"}'
F='metrics.m7 > 0.9 and params.lr = "0.001" and tags.team = "ads"'
for lim in 100 0; do
  ts=()
  for i in 1 2 3 4 5 6 7; do
    t0=$(date +%s%N)
    KEEL_TRACKING="$W/list" "$KEEL" runs list --filter "$F" --limit $lim > "$W/list.out"
    ts+=($(( ($(date +%s%N) - t0) / 1000 )))
  done
  rows=$(($(wc -l < "$W/list.out") - 1))
  echo "limit $lim: $rows rows, median $(printf '%s\n' "${ts[@]}" | median) us (process start to exit), runs: ${ts[*]}"
done
for lim in 100 0; do
  echo "in-process (open + filter + read each run), limit $lim: $("$BUILD/bench/track_bench" list "$W/list" "$F" $lim 7)"
done
echo "in-process, no filter, newest 100: $("$BUILD/bench/track_bench" list "$W/list" "" 100 7)"
t0=$(date +%s%N); "$KEEL" version > /dev/null; echo "for reference, 'keel version' (process start only): $(( ($(date +%s%N) - t0) / 1000 )) us"
ts=()
for i in 1 2 3 4 5 6 7; do
  t0=$(date +%s%N)
  KEEL_TRACKING="$W/list" "$KEEL" runs list --sort -metrics.m3 --limit 20 > /dev/null
  ts+=($(( ($(date +%s%N) - t0) / 1000 )))
done
echo "sort by metrics.m3 over all 10,000 runs, top 20: median $(printf '%s\n' "${ts[@]}" | median) us"

echo "--- 3. 4 processes logging concurrently for ${TRACK_BENCH_SECONDS:-30} s"
export KEEL_TRACKING="$W/conc"
"$KEEL" runs simulate --experiment init --steps 1 > /dev/null   # create the store first (read-only commands never do)
pids=""
for i in 1 2 3 4; do
  "$KEEL" runs simulate --experiment conc --name "w$i" --duration "${TRACK_BENCH_SECONDS:-30}" --batch 100 --metrics 10 --json > "$W/w$i.json" &
  pids="$pids $!"
done
for p in $pids; do wait $p; done
"$KEEL" runs export --format json --filter 'experiment = "conc"' > "$W/conc.json"
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
runs = {r["name"]: r for r in json.load(open(w + "/conc.json"))}
tot = lost = errs = 0
for i in range(1, 5):
    s = json.load(open("%s/w%d.json" % (w, i)))
    r = runs["w%d" % i]
    tot += s["points"]; errs += s["lock_errors"]; lost += s["points"] - r["points"]
    print("writer %d: %d points, %.0f points/s, %d lock errors, stored %d" % (i, s["points"], s["points_per_s"], s["lock_errors"], r["points"]))
print("total %d points, lock errors %d, lost points %d" % (tot, errs, lost))
sys.exit(1 if errs or lost else 0)
PY
