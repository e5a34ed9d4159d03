#!/usr/bin/env bash
# The experiment store on PostgreSQL (issue 28 goals), each measured against
# the SQLite store in the same run (the peer):
#  1. 1,000,000 metric points through the batch API, batches of 10,000
#     (goal <= 5 s), median of 3
#  2. `keel runs list` with a three-clause filter over 10,000 runs x 50
#     metrics, process start to exit (goal <= 100 ms), median of 7 (the
#     store generated on SQLite, copied with `keel runs migrate`, timed too)
#  3. 16 writer processes for 30 s: 0 errors, 0 lost points
# A throwaway server is started by tests/integration/lib_pg.sh (as the tests
# do). Writes bench/results/track-pg-log-1m.json, track-pg-list-filter.json,
# track-pg-writers.json. TRACK_BENCH_SECONDS overrides the 30 s of (3),
# TRACK_BENCH_RUNS the 10,000 runs of (2), TRACK_BENCH_POINTS the 1,000,000;
# TRACK_BENCH_ONLY="log list writers" (any of them) runs and records only those.
set -eu
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-build}
KEEL="$ROOT/$BUILD/keel"
SECONDS_W=${TRACK_BENCH_SECONDS:-30}
RUNS=${TRACK_BENCH_RUNS:-10000}
POINTS=${TRACK_BENCH_POINTS:-1000000}
mkdir -p "$BUILD/bench"
gcc -O2 -std=c11 -D_GNU_SOURCE -pthread -Iinclude bench/track/track_bench.c "$BUILD/libkeel.a" \
  $(pkg-config --libs sqlite3 libpq libcrypto yaml-0.1 libcjson) -lm -o "$BUILD/bench/track_bench"
TB="$ROOT/$BUILD/bench/track_bench"
W=$(mktemp -d "${TMPDIR:-/tmp}/keel-track-pg-bench-XXXXXX")
. tests/integration/lib_pg.sh
pg_available || { echo "no PostgreSQL server binaries in $PG_BIN (mk/packages.txt: postgresql)"; exit 1; }
pg_start || exit 1
trap 'pg_stop; rm -rf "$W"' EXIT
ONLY=" ${TRACK_BENCH_ONLY:-log list writers} "
want() { [[ "$ONLY" == *" $1 "* ]]; }
declare -A LOG LIST WR
median() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
jfield() { /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
MACHINE="$(nproc)-core $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load $(cut -d' ' -f1 /proc/loadavg) at start, PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}')"

if want log; then
echo "--- 1. log $POINTS points (batch API, batches of 10,000, 1 and 10 keys), median of 3"
for keys in 1 10; do
  for eng in pg sqlite; do
    ts=()
    for i in 1 2 3; do
      if [ $eng = pg ]; then store=$(pg_newdb "log_${keys}_$i"); else rm -rf "$W/log"; store="$W/log"; fi
      out=$("$TB" log "$store" "$POINTS" 10000 $keys)
      [ "$(jfield "$out" stored)" = "$POINTS" ] || { echo "lost points: $out"; exit 1; }
      ts+=("$(jfield "$out" seconds)")
    done
    LOG[$eng$keys]=$(printf '%s\n' "${ts[@]}" | median)
    echo "$eng, $keys key(s): median ${LOG[$eng$keys]} s (runs: ${ts[*]})"
  done
done

fi

if want list; then
echo "--- 2. runs list with a three-clause filter over $RUNS runs x 50 metrics"
F='metrics.m7 > 0.9 and params.lr = "0.001" and tags.team = "ads"'
g_url=$(pg_newdb list)
echo "generate (sqlite): $("$TB" gen "$W/list" "$RUNS" 50 2)"
t0=$(date +%s%N)
"$KEEL" runs migrate --from "$W/list" --to "$g_url"
echo "keel runs migrate of that store to PostgreSQL: $((($(date +%s%N) - t0) / 1000000)) ms"
pg_psql -d list -c 'VACUUM ANALYZE' > /dev/null
for eng in pg sqlite; do
  [ $eng = pg ] && store=$g_url || store="$W/list"
  ts=()
  for i in 1 2 3 4 5 6 7; do
    t0=$(date +%s%N)
    KEEL_TRACKING="$store" "$KEEL" runs list --filter "$F" --limit 100 > "$W/list.out"
    ts+=($((($(date +%s%N) - t0) / 1000)))
  done
  rows=$(($(wc -l < "$W/list.out") - 1))
  LIST[$eng]=$(printf '%s\n' "${ts[@]}" | median)
  LIST[${eng}rows]=$rows
  echo "$eng: $rows rows, median ${LIST[$eng]} us (process start to exit), runs: ${ts[*]}"
done
[ "${LIST[pgrows]}" = "${LIST[sqliterows]}" ] || { echo "the engines listed different runs"; exit 1; }
fi

if want writers; then
echo "--- 3. 16 writer processes for $SECONDS_W s"
for eng in pg sqlite; do
  if [ $eng = pg ]; then store=$(pg_newdb writers); else store="$W/conc"; fi
  KEEL_TRACKING="$store" "$KEEL" runs simulate --experiment init --steps 1 > /dev/null
  pids=""
  for i in $(seq 16); do
    KEEL_TRACKING="$store" "$KEEL" runs simulate --experiment conc --name "w$i" --duration "$SECONDS_W" --batch 100 --metrics 10 --json > "$W/w$i.json" 2> "$W/w$i.err" &
    pids="$pids $!"
  done
  failed=0
  for p in $pids; do wait $p || failed=$((failed + 1)); done
  KEEL_TRACKING="$store" "$KEEL" runs export --format json --filter 'experiment = "conc"' > "$W/conc.json"
  res=$(/usr/bin/python3 - "$W" "$failed" <<'PY'
import json, sys
w, failed = sys.argv[1], int(sys.argv[2])
runs = {r["name"]: r for r in json.load(open(w + "/conc.json"))}
tot = lost = errs = 0
for i in range(1, 17):
    s = json.load(open("%s/w%d.json" % (w, i)))
    r = runs["w%d" % i]
    tot += s["points"]; errs += s["lock_errors"]; lost += s["points"] - r["points"]
print(tot, errs + failed, lost)
PY
)
  read -r tot errs lost <<< "$res"
  WR[${eng}pts]=$tot
  WR[${eng}err]=$errs
  WR[${eng}lost]=$lost
  echo "$eng: $tot points from 16 writers in $SECONDS_W s ($((tot / SECONDS_W)) points/s), errors $errs, lost $lost"
done
fi

# ---- results (bench/results/*.json, then the table in bench/README.md)
/usr/bin/python3 - "$ROOT" "$MACHINE" "$SECONDS_W" "$RUNS" "$POINTS" \
  "${LOG[pg1]:-}" "${LOG[sqlite1]:-}" "${LOG[pg10]:-}" "${LOG[sqlite10]:-}" "${LIST[pg]:-}" "${LIST[sqlite]:-}" "${LIST[pgrows]:-}" \
  "${WR[pgpts]:-}" "${WR[pgerr]:-}" "${WR[pglost]:-}" "${WR[sqlitepts]:-}" "${WR[sqliteerr]:-}" "${WR[sqlitelost]:-}" <<'PY'
import datetime, json, os, sys
(root, machine, secs, runs, points, pg1, sq1, pg10, sq10, lpg, lsq, rows,
 wpg, epg, lostpg, wsq, esq, lostsq) = sys.argv[1:]
today = datetime.date.today().isoformat()
base = {"area": "track", "machine": machine, "date": today, "command": "bash bench/track/pg.sh", "source": "bench/track/pg.sh"}
recs = []
if pg1:
    recs.append(
    dict(base, id="track-pg-log-1m", order=61,
         what="PostgreSQL store: log %s metric points, batches of 10,000, 1 key" % format(int(points), ","),
         peer="SQLite store, same run (goal ≤ 5 s)", ratio=round(float(pg1) / float(sq1), 2),
         unit="PostgreSQL/SQLite time (%.2f s vs %.2f s; 10 keys: %.2f s vs %.2f s; lower is better)" % (
             float(pg1), float(sq1), float(pg10), float(sq10))))
if lpg:
    recs.append(
    dict(base, id="track-pg-list-filter", order=71,
         what="PostgreSQL store: keel runs list, three-clause filter over %s runs × 50 metrics, process start to exit" % format(int(runs), ","),
         peer="SQLite store, same run (goal ≤ 100 ms)", ratio=round(float(lpg) / float(lsq), 2),
         unit="PostgreSQL/SQLite time (%.1f ms vs %.1f ms, %s rows; lower is better)" % (float(lpg) / 1000, float(lsq) / 1000, rows)))
if wpg:
    recs.append(
    dict(base, id="track-pg-writers", order=72,
         what="PostgreSQL store: 16 writer processes for %s s, batches of 100 × 10 metrics" % secs,
         peer="SQLite store, same run (goal: 0 errors, 0 lost points)", ratio=round(int(wpg) / max(int(wsq), 1), 2),
         unit="PostgreSQL/SQLite points written (%s vs %s; errors %s vs %s; lost %s vs %s; higher is better)" % (
             wpg, wsq, epg, esq, lostpg, lostsq)))
for r in recs:
    p = os.path.join(root, "bench", "results", r["id"] + ".json")
    with open(p + ".tmp", "w", encoding="utf-8") as fh:
        json.dump(r, fh, indent=2, ensure_ascii=False)
        fh.write("\n")
    os.replace(p + ".tmp", p)
    print("wrote", p)
PY
/usr/bin/python3 tools/bench_table.py render
! want writers || { [ "${WR[pgerr]}" = 0 ] && [ "${WR[pglost]}" = 0 ]; } || { echo "writers: errors or lost points"; exit 1; }
