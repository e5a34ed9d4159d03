#!/usr/bin/env bash
# Runs the Parquet reader fuzzer (fuzz/fuzz_parquet.c) for N seconds on a
# corpus in build/fuzz/corpus-parquet seeded with parquet-testing files and
# small keel-written files and fuzz/corpus/fuzz_parquet/. Findings land in build/fuzz/ (crash-*, leak-*).
set -eu
FUZZ=${1:-build/fuzz/parquet_fuzz}; SECS=${2:-600}; BUILD=${3:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
corpus="$root/build/fuzz/corpus-parquet"
mkdir -p "$corpus"
pt="$root/tests/data/parquet-testing"
for f in "$pt"/data/*.parquet "$pt"/bad_data/*.parquet; do
  [ -e "$f" ] || continue
  if [ "$(stat -c %s "$f")" -lt 200000 ]; then cp -n "$f" "$corpus/" || true; fi
done
# the committed regression seeds (footers that lie about the row count, ...)
cp -n "$root"/fuzz/corpus/fuzz_parquet/* "$corpus/" 2>/dev/null || true
for c in none snappy zstd; do
  "$BUILD/parquet-tool" write "$corpus/keel_$c.parquet" --codec "$c" --rows 60 --page-bytes 300 --rg-rows 25 > /dev/null
  "$BUILD/parquet-tool" write "$corpus/keel_${c}_v2.parquet" --codec "$c" --rows 40 --v2 --dict 0 > /dev/null
done
cd "$root/build/fuzz"
exec "$(cd "$root" && realpath "$FUZZ")" -max_total_time="$SECS" -rss_limit_mb=2048 -max_len=262144 -timeout=20 "$corpus"
