#!/usr/bin/env bash
# Parquet benchmark: keel vs DuckDB 1.5 on the same machine, same threads, one run.
#   data:  the click log (kl_clickgen, 2M rows, seed 42) as CSV, loaded once
#   write: keel writes the columns to Parquet (zstd) vs DuckDB COPY of an in-memory table
#   scan:  SELECT category, count(*), sum(item_price) GROUP BY category over keel's
#          file and DuckDB's file (keel: kl_pq_group_by, a vector scan)
# The scans run in ROUNDS interleaved rounds (keel, DuckDB, keel, ...) of REPS
# timed repetitions each, so that both sides see the same machine load; the
# medians are over all rounds. Prints medians, ratios (keel / DuckDB) and the
# load average; results go to bench/README.md by hand.
# usage: bench/parquet/run.sh [ROWS] [THREADS] [REPS] [ROUNDS]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
ROWS=${1:-2000000}; THREADS=${2:-2}; REPS=${3:-5}; ROUNDS=${4:-5}
out="$root/build/bench/parquet"; mkdir -p "$out"
tool="$root/$BUILD/parquet-tool"
npm_dir="$root/build/npm"
[ -d "$npm_dir/node_modules/@duckdb/node-api" ] || npm install --prefix "$npm_dir" @duckdb/node-api >/dev/null
export DUCKDB_NODE_PATH="$npm_dir/node_modules"
[ -s "$out/clicks.csv" ] || "$tool" clickcsv "$out/clicks.csv" --rows "$ROWS" >/dev/null
export KEEL_THREADS=$THREADS
load0=$(cut -d' ' -f1 /proc/loadavg)
kw=$("$tool" gen "$out/clicks_keel.parquet" --rows "$ROWS" --reps "$REPS")
dd=$(node "$root/bench/parquet/duckdb_bench.mjs" "$out/clicks.csv" "$out/clicks_keel.parquet" "$out" "$THREADS" "$REPS")
: > "$out/rounds.jsonl"
for r in $(seq "$ROUNDS"); do
  echo "{\"keel_keel\":$("$tool" scan "$out/clicks_keel.parquet" --threads "$THREADS" --reps "$REPS")}" >> "$out/rounds.jsonl"
  echo "{\"duck\":$(node "$root/bench/parquet/duckdb_bench.mjs" - "$out/clicks_keel.parquet" "$out" "$THREADS" "$REPS" scan)}" >> "$out/rounds.jsonl"
  echo "{\"keel_duck\":$("$tool" scan "$out/clicks_duckdb.parquet" --threads "$THREADS" --reps "$REPS")}" >> "$out/rounds.jsonl"
done
load1=$(cut -d' ' -f1 /proc/loadavg)
python3 - "$kw" "$dd" "$THREADS" "$ROWS" "$out" "$load0" "$load1" <<'PY'
import json, statistics, sys, os
kw, dd = json.loads(sys.argv[1]), json.loads(sys.argv[2])
threads, rows, out, load0, load1 = sys.argv[3:8]
kk, kd, dk, ddf = [], [], [], []
ks = None
for line in open(os.path.join(out, "rounds.jsonl")):
    x = json.loads(line)
    if "keel_keel" in x: kk += x["keel_keel"]["seconds"]; ks = x["keel_keel"]
    if "keel_duck" in x: kd += x["keel_duck"]["seconds"]
    if "duck" in x: dk += x["duck"]["scan_keel_file"]; ddf += x["duck"]["scan_duckdb_file"]
med = statistics.median
rows_ = [
  ("write 2M rows, zstd", med(kw["seconds"]), med(dd["write"])),
  ("scan keel's file", med(kk), med(dk)),
  ("scan DuckDB's file", med(kd), med(ddf)),
]
dsize = os.path.getsize(os.path.join(out, "clicks_duckdb.parquet"))
print(f"threads {threads}, rows {rows}, keel file {kw['bytes']/1e6:.1f} MB, DuckDB file {dsize/1e6:.1f} MB, load average {load0} -> {load1}, scans: {len(kk)} per case")
print("| case | threads | keel (s) | DuckDB (s) | keel / DuckDB |")
print("|---|---|---|---|---|")
for name, k, d in rows_:
    print(f"| {name} | {threads} | {k:.3f} | {d:.3f} | {k/d:.2f}x |")
res = dd["result"]
ok = abs(ks["sum"] - sum(float(r[2]) for r in res)) < 1e-6 * max(1, ks["sum"]) and all(int(n) == ks["counts"].get(c, -1) for c, n, _ in res)
print("results agree:", ok)
PY
