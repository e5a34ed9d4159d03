#!/usr/bin/env bash
# Benchmark: `keel ingest` (full validation, zstd) vs DuckDB
#   COPY (SELECT * FROM read_csv('clicks.csv')) TO 'x.parquet' (FORMAT parquet, COMPRESSION zstd)
# on the 2M-row click log, same thread count, runs interleaved; prints medians
# and the ratio. keel is timed as a whole process (start-up, hashing, manifest,
# fsync and publish included); DuckDB inside one node process per run (its
# start-up and the node runtime excluded). After each ingest, the scan of the
# output (count and sum of item_price by category), cold (first scan of the
# files, no warm-up), both timed inside their process: kl_pq_group_by over
# keel's part files (build/parquet-tool scan) vs DuckDB's SELECT ... GROUP BY
# over its file. CPU of the scan: the whole process for keel (start-up
# included), the query for DuckDB.
# Env: THREADS (default 2), RUNS (default 5), ROWS (default 2000000).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
KEEL="$root/$BUILD/keel"
THREADS=${THREADS:-2}
RUNS=${RUNS:-5}
ROWS=${ROWS:-2000000}
W="$root/$BUILD/bench-ingest"
NPM="$root/build/npm"
mkdir -p "$W"
[ -x "$KEEL" ] || { echo "build keel first (make)"; exit 1; }
if [ ! -d "$NPM/node_modules/@duckdb/node-api" ]; then
  npm install --prefix "$NPM" @duckdb/node-api > "$W/npm.log" 2>&1 || { echo "npm install @duckdb/node-api failed (see $W/npm.log)"; exit 1; }
fi
csv="$W/clicks-$ROWS.csv"
[ -f "$csv" ] || "$KEEL" data gen-clicks "$csv" --rows "$ROWS" --seed 42
export DUCKDB_NODE_PATH="$NPM/node_modules" DUCKDB_THREADS=$THREADS
js="$root/tests/integration/ingest_duckdb.mjs"
keel_t=(); duck_t=(); keel_c=(); duck_c=(); kscan_t=(); dscan_t=(); kscan_c=(); dscan_c=()
for i in $(seq "$RUNS"); do
  rm -rf "$W/ds" "$W/x.parquet"
  /usr/bin/time -f "%e %U %S" -o "$W/time.txt" "$KEEL" --threads "$THREADS" ingest "$csv" --schema bench/ingest/clicks.yaml --out "$W/ds" > /dev/null
  read -r kw ku ks < "$W/time.txt"
  keel_t+=("$kw"); keel_c+=("$(echo "$ku + $ks" | bc -l)")
  d=$(node "$js" time "COPY (SELECT * FROM read_csv('$csv')) TO '$W/x.parquet' (FORMAT parquet, COMPRESSION zstd)" 1)
  duck_t+=("$(echo "$d" | sed 's/.*"wall":\([0-9.e-]*\).*/\1/')"); duck_c+=("$(echo "$d" | sed 's/.*"cpu":\([0-9.e-]*\).*/\1/')")
  kj=$(/usr/bin/time -f "%e %U %S" -o "$W/time.txt" "$root/$BUILD/parquet-tool" scan "$W"/ds/versions/*/*.parquet --threads "$THREADS" --reps 1 --warmup 0)
  read -r kw ku ks < "$W/time.txt"
  kscan_t+=("$(echo "$kj" | sed 's/.*"seconds":\[\([0-9.e-]*\).*/\1/')"); kscan_c+=("$(echo "$ku + $ks" | bc -l)")
  d=$(node "$js" time "SELECT category, count(*), sum(item_price) FROM read_parquet('$W/x.parquet') GROUP BY category" 1)
  dscan_t+=("$(echo "$d" | sed 's/.*"wall":\([0-9.e-]*\).*/\1/')"); dscan_c+=("$(echo "$d" | sed 's/.*"cpu":\([0-9.e-]*\).*/\1/')")
  printf 'run %d: keel %.3f s (cpu %.3f), duckdb %.3f s (cpu %.3f); scan: keel %.3f s (cpu %.3f), duckdb %.3f s (cpu %.3f)\n' "$i" "${keel_t[-1]}" "${keel_c[-1]}" "${duck_t[-1]}" "${duck_c[-1]}" \
    "${kscan_t[-1]}" "${kscan_c[-1]}" "${dscan_t[-1]}" "${dscan_c[-1]}"
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
k=$(med "${keel_t[@]}"); d=$(med "${duck_t[@]}"); kc=$(med "${keel_c[@]}"); dc=$(med "${duck_c[@]}")
ks=$(du -sb "$W/ds/versions" | cut -f1); ds=$(stat -c %s "$W/x.parquet")
echo
echo "| date | machine | rows | threads | keel wall (median s) | DuckDB wall | wall ratio | keel CPU s | DuckDB CPU s | CPU ratio | keel bytes | DuckDB bytes |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '| %s | %s | %s | %s | %.3f | %.3f | %.2f× | %.3f | %.3f | %.2f× | %s | %s |\n' "$(date -u +%F)" "$(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)" \
  "$ROWS" "$THREADS" "$k" "$d" "$(echo "$k / $d" | bc -l)" "$kc" "$dc" "$(echo "$kc / $dc" | bc -l)" "$ks" "$ds"
k=$(med "${kscan_t[@]}"); d=$(med "${dscan_t[@]}"); kc=$(med "${kscan_c[@]}"); dc=$(med "${dscan_c[@]}")
printf '| %s (scan: count, sum by category) | %s | %s | %s | %.3f | %.3f | %.2f× | %.3f | %.3f | %.2f× | | |\n' "$(date -u +%F)" "$(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)" \
  "$ROWS" "$THREADS" "$k" "$d" "$(echo "$k / $d" | bc -l)" "$kc" "$dc" "$(echo "$kc / $dc" | bc -l)"
