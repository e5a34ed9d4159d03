#!/usr/bin/env bash
# bench/features: the ten typical features of features.yaml over the click
# log (ROWS, default 2M) — keel fit + apply vs the same features in DuckDB 1.5
# window SQL over the same Parquet, and in pandas 1.5 (over the CSV: Debian's
# pandas has no Parquet engine) — plus the online transform of one record with
# windows (p50/p99). Results: bench/README.md (features).
set -eu
cd "$(dirname "$0")/../.."
SRC=$PWD
KEEL=${KEEL:-$SRC/build/keel}
ROWS=${ROWS:-2000000}
W=${BENCH_DIR:-$SRC/build/bench-features}
NPM=$SRC/build/npm
mkdir -p "$W"
cd "$W"
if [ ! -d "$NPM/node_modules/@duckdb/node-api" ]; then
  npm install --prefix "$NPM" @duckdb/node-api >/dev/null
fi
export DUCKDB_NODE_PATH=$NPM/node_modules
if [ ! -f clicks-$ROWS.csv ]; then "$KEEL" data gen-clicks clicks-$ROWS.csv --rows "$ROWS" --seed 42 >/dev/null; fi
if [ ! -d ds-$ROWS ]; then
  cat > clicks.yaml <<'Y'
name: clicks
columns:
  - {name: user_id, type: int64, nullable: false, min: 1}
  - {name: item_price, type: float64, min: 0, max_null_ratio: 0.05}
  - {name: ts, type: timestamp, timezone: UTC, nullable: false}
  - {name: category, type: category, nullable: false, values: [books, toys, home, sports, garden, beauty]}
  - {name: clicked, type: bool, nullable: false}
Y
  "$KEEL" ingest clicks-$ROWS.csv --schema clicks.yaml --out ds-$ROWS >/dev/null
fi
GLOB="$W/ds-$ROWS/versions/$(cat ds-$ROWS/current)/**/*.parquet"
t() { local s; s=$(date +%s.%N); "$@" > /dev/null; echo "$(date +%s.%N) - $s" | bc; }
echo "rows: $ROWS, threads: ${KEEL_THREADS:-default}"
for i in 1 2 3; do
  fit=$(t "$KEEL" features fit "$SRC/bench/features/features.yaml" --data ds-$ROWS --out f.json)
  "$KEEL" features apply f.json --data ds-$ROWS --out keel-out.parquet --json > apply.json
  app=$(python3 -c "import json; d=json.load(open('apply.json')); print(d['read_s'], d['apply_s'], d['write_s'])")
  duck=$(node "$SRC/bench/features/duckdb_features.mjs" "$GLOB" duck-out.parquet)
  echo "run $i: keel fit ${fit}s, keel apply read/compute/write ${app}s | duckdb $duck"
done
echo "pandas (one run): $(/usr/bin/python3 "$SRC/bench/features/pandas_features.py" clicks-$ROWS.csv)"
"$KEEL" features latency f.json --data ds-$ROWS --records 20000
"$KEEL" features describe f.json
