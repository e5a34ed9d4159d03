#!/usr/bin/env bash
# make fuzz: builds libkeel with clang's fuzzer instrumentation and ASan, then
# runs every fuzz/fuzz_*.c target for FUZZ_SECONDS (default 600) each, with
# its seed corpus fuzz/corpus/<target>/ when present. FUZZ=name runs one.
# Findings (crash-*, leak-*, timeout-*) land in build/fuzz/<target>/. Then the
# raw-value grammar property test runs long (FUZZ=grammar_property alone).
set -u
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-600}
san=fuzzer-no-link,address
lib=build/san-fuzzer-no-link-address/libkeel.a
make --no-print-directory CC=clang SANITIZE=$san "$lib" >/dev/null || exit 1
libs=$(pkg-config --libs openblas libcrypto yaml-0.1 libcjson libzstd snappy zlib liblz4 libbrotlidec libturbojpeg libpng libcurl libmicrohttpd sqlite3 libpq libprotobuf-c)
rc=0
for src in fuzz/fuzz_*.c; do
  name=$(basename "$src" .c)
  [ -n "${FUZZ:-}" ] && [ "$FUZZ" != "$name" ] && continue
  out=build/fuzz/$name; mkdir -p "$out/corpus"
  [ -d "fuzz/corpus/$name" ] && cp -n fuzz/corpus/$name/* "$out/corpus/" 2>/dev/null
  clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address -Iinclude -Isrc -Ibuild/san-fuzzer-no-link-address/gen \
    "$src" "$lib" $libs -lm -ldl -pthread -o "$out/$name" || { rc=1; continue; }
  echo "fuzzing $name for ${secs}s"
  (cd "$out" && ./"$name" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix=./ corpus) \
    > "$out/log.txt" 2>&1 || { echo "FINDING in $name: see $out/log.txt"; rc=1; }
  tail -3 "$out/log.txt"
done
# The raw-value grammar property test (tests/unit/feature/test_grammar_property.c),
# long: PROPERTY_RECORDS records (default 500000) with a seed from the clock.
if [ -z "${FUZZ:-}" ] || [ "$FUZZ" = grammar_property ]; then
  make --no-print-directory -j"$(nproc)" build/keel-unit >/dev/null || exit 1
  seed=${PROPERTY_SEED:-$(date +%s)}
  echo "grammar property: ${PROPERTY_RECORDS:-500000} records, seed $seed"
  KEEL_PROPERTY_RECORDS=${PROPERTY_RECORDS:-500000} KEEL_PROPERTY_SEED=$seed \
    build/keel-unit feature_grammar_property 2>&1 | tail -3 | grep -q '^PASS' || { echo "FINDING in grammar property (seed $seed)"; rc=1; }
fi
exit $rc
