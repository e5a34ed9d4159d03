#!/usr/bin/env bash
# Parquet benchmark: keel vs DuckDB 1.5 on the same machine, same threads, one run.
#   data:  the click log (kl_clickgen, 2M rows, seed 42) as CSV, loaded once
#   write: keel writes the columns to Parquet (zstd) vs DuckDB COPY of an in-memory table
#   scan:  sum(item_price) + count by category over keel's file (both engines) and DuckDB's file
# Prints medians and ratios (keel / DuckDB); results go to bench/README.md by hand.
# usage: bench/parquet/run.sh [ROWS] [THREADS] [REPS]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
ROWS=${1:-2000000}; THREADS=${2:-2}; REPS=${3:-5}
out="$root/build/bench/parquet"; mkdir -p "$out"
tool="$root/$BUILD/parquet-tool"
npm_dir="$root/build/npm"
[ -d "$npm_dir/node_modules/@duckdb/node-api" ] || npm install --prefix "$npm_dir" @duckdb/node-api >/dev/null
export DUCKDB_NODE_PATH="$npm_dir/node_modules"
[ -s "$out/clicks.csv" ] || "$tool" clickcsv "$out/clicks.csv" --rows "$ROWS" >/dev/null
export KEEL_THREADS=$THREADS
kw=$("$tool" gen "$out/clicks_keel.parquet" --rows "$ROWS" --reps "$REPS")
ks=$("$tool" scan "$out/clicks_keel.parquet" --threads "$THREADS" --reps "$REPS")
dd=$(node "$root/bench/parquet/duckdb_bench.mjs" "$out/clicks.csv" "$out/clicks_keel.parquet" "$out" "$THREADS" "$REPS")
ks2=$("$tool" scan "$out/clicks_duckdb.parquet" --threads "$THREADS" --reps "$REPS")
python3 - "$kw" "$ks" "$dd" "$ks2" "$THREADS" "$ROWS" "$out" <<'PY'
import json, statistics, sys, os
kw, ks, dd, ks2 = (json.loads(x) for x in sys.argv[1:5])
med = lambda v: statistics.median(v)
rows = [
  ("write 2M rows, zstd", med(kw["seconds"]), med(dd["write"])),
  ("scan keel's file", med(ks["seconds"]), med(dd["scan_keel_file"])),
  ("scan DuckDB's file", med(ks2["seconds"]), med(dd["scan_duckdb_file"])),
]
dsize = os.path.getsize(os.path.join(sys.argv[7], "clicks_duckdb.parquet"))
print(f"threads {sys.argv[5]}, rows {sys.argv[6]}, keel file {kw['bytes']/1e6:.1f} MB, DuckDB file {dsize/1e6:.1f} MB")
print("| case | keel (s) | DuckDB (s) | keel / DuckDB |")
print("|---|---|---|---|")
for name, k, d in rows:
    print(f"| {name} | {k:.3f} | {d:.3f} | {k/d:.2f}x |")
s = {r[0]: r[1] for r in dd["result"]}
ok = abs(ks["sum"] - sum(float(r[2]) for r in dd["result"])) < 1e-3 * max(1, ks["sum"]) and all(int(dd_n) == ks["counts"].get(c, -1) for c, dd_n, _ in dd["result"])
print("results agree:", ok)
PY
