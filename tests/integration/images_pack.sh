#!/usr/bin/env bash
# Integration tests of keel datagen defects and keel pack: deterministic
# generation and packing at any thread count, bad inputs (non-image,
# truncated JPEG, zero-size, 30000x30000 bomb header) reported and skipped or
# failing, shard corruption (flipped byte -> sha256 error with verify,
# truncated shard), resume after SIGKILL, atomicity (no manifest until done).
. "$KEEL_SRC/tests/integration/lib.sh"

# --- datagen: same seed -> identical files at 1 and 2 threads
expect_rc datagen_1thread 0 "$KEEL" datagen defects --out "$T/d1" --n 240 --size 64 --seed 7 --threads 1
expect_rc datagen_2threads 0 "$KEEL" datagen defects --out "$T/d2" --n 240 --size 64 --seed 7 --threads 2 --json
if diff -r "$T/d1" "$T/d2" >/dev/null; then pass datagen_deterministic; else fail datagen_deterministic "files differ"; fi
n=$(find "$T/d1" -name '*.jpg' | wc -l)
[ "$n" -eq 240 ] && [ "$(ls "$T/d1/scratch" | wc -l)" -eq 80 ] && [ "$(wc -l < "$T/d1/labels.csv")" -eq 241 ] \
  && pass datagen_layout || fail datagen_layout "$n files"
expect_rc datagen_other_seed 0 "$KEEL" datagen defects --out "$T/d3" --n 3 --size 64 --seed 8
cmp -s "$T/d1/good/000000.jpg" "$T/d3/good/000000.jpg" && fail datagen_seed_matters "same bytes" || pass datagen_seed_matters
expect_rc datagen_usage 2 "$KEEL" datagen defects --n 5

# --- bad inputs in the source
src=$T/src; cp -r "$T/d1" "$src"
echo "hello, not an image" > "$src/good/notes.jpg"
head -c 600 "$T/d1/dent/000002.jpg" > "$src/dent/truncated.jpg"
: > "$src/scratch/empty.jpg"
$PYTHON - "$T/d1/good/000000.jpg" "$src/good/bomb.jpg" <<'PY'
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
i = b.index(b'\xff\xc0')
b[i+5:i+9] = (30000).to_bytes(2, 'big') * 2
open(sys.argv[2], 'wb').write(b)
PY
expect_rc pack_skip 0 "$KEEL" pack "$src" --out "$T/s1" --shard-size 64K --threads 1
for f in good/notes.jpg dent/truncated.jpg scratch/empty.jpg good/bomb.jpg; do
  grep -q "skipped $f: " "$T/err" && pass "pack_reports_${f//\//_}" || fail "pack_reports_${f//\//_}" "$(head -c 300 "$T/err")"
done
grep -q "good/bomb.jpg: .*30000x30000.*pixel cap" "$T/err" && pass pack_bomb_reason || fail pack_bomb_reason "$(grep bomb "$T/err")"
grep -q "truncated JPEG" "$T/err" && grep -q "zero-size" "$T/err" && grep -q "not a JPEG or PNG" "$T/err" \
  && pass pack_reasons || fail pack_reasons "$(cat "$T/err" | head -c 400)"
grep -q '"records": 240' "$T/s1/manifest.json" && grep -q '"skipped": 4' "$T/s1/manifest.json" \
  && pass pack_counts || fail pack_counts "$(head -c 300 "$T/s1/manifest.json")"
expect_rc pack_fail_mode 1 "$KEEL" pack "$src" --out "$T/s_fail" --on-error fail
grep -q "dent/truncated.jpg" "$T/err" && [ ! -e "$T/s_fail/manifest.json" ] && pass pack_fail_names_file_no_manifest \
  || fail pack_fail_names_file_no_manifest "$(head -c 300 "$T/err")"

# --- determinism across thread counts
expect_rc pack_2threads 0 "$KEEL" pack "$src" --out "$T/s2" --shard-size 64K --threads 2 --json
if diff -r -x .pack-state.json "$T/s1" "$T/s2" >/dev/null; then pass pack_deterministic; else fail pack_deterministic "shards differ"; fi
grep -q '"skipped": 4' "$T/out" && grep -q '"reason": ' "$T/out" && pass pack_json || fail pack_json "$(head -c 300 "$T/out")"
expect_rc pack_again_noop 0 "$KEEL" pack "$src" --out "$T/s2" --shard-size 64K
grep -q "already packed" "$T/out" && pass pack_again_reports || fail pack_again_reports "$(cat "$T/out")"
expect_rc pack_other_set_refused 1 "$KEEL" pack "$T/d3" --out "$T/s2"
grep -q -- "--force" "$T/err" && pass pack_other_set_message || fail pack_other_set_message "$(cat "$T/err")"

# --- labels from a CSV (the generator's labels.csv) give the same records
expect_rc pack_labels_csv 0 "$KEEL" pack "$T/d1" --out "$T/s_csv" --labels "$T/d1/labels.csv" --shard-size 64K
a=$(grep -o '"sha256": "[0-9a-f]*"' "$T/s_csv/manifest.json" | md5sum); b=$(grep -o '"sha256": "[0-9a-f]*"' "$T/s1/manifest.json" | md5sum)
[ "$a" = "$b" ] && pass pack_labels_csv_same_shards || fail pack_labels_csv_same_shards "shards differ"
printf 'path,label\ngood/000000.jpg,ok\nmissing.jpg,ok\n' > "$T/l.csv"
expect_rc pack_labels_missing_file 0 "$KEEL" pack "$T/d1" --out "$T/s_l" --labels "$T/l.csv"
grep -q "skipped missing.jpg: file not found" "$T/err" && pass pack_labels_missing_reported || fail pack_labels_missing_reported "$(cat "$T/err")"

# --- corrupt shards: flipped byte (sha256 with verify), truncated shard
cp -r "$T/s1" "$T/c1"
$PYTHON - "$T/c1/shard-00001.kshard" <<'PY'
import sys
f = open(sys.argv[1], 'r+b'); f.seek(5000); b = f.read(1); f.seek(5000); f.write(bytes([b[0] ^ 0x40])); f.close()
PY
expect_rc shard_verify_flipped 1 "$KEEL" pack --verify "$T/c1"
grep -q "shard-00001.kshard: sha256 mismatch" "$T/err" && pass shard_verify_message || fail shard_verify_message "$(cat "$T/err")"
expect_rc shard_verify_ok 0 "$KEEL" pack --verify "$T/s1"
cp -r "$T/s1" "$T/c2"; truncate -s 10000 "$T/c2/shard-00002.kshard"
expect_rc shard_truncated 1 "$KEEL" pack --verify "$T/c2"
grep -q "shard-00002.kshard.*truncated" "$T/err" && pass shard_truncated_message || fail shard_truncated_message "$(cat "$T/err")"

# --- resume after SIGKILL: finished shards are kept, the result is identical
"$KEEL" datagen defects --out "$T/big" --n 1500 --size 96 --seed 3 >/dev/null 2>&1
"$KEEL" pack "$T/big" --out "$T/r_ref" --shard-size 32K --threads 1 >/dev/null 2>&1
"$KEEL" pack "$T/big" --out "$T/r" --shard-size 32K --threads 1 >/dev/null 2>&1 &
pid=$!
for i in $(seq 1 200); do
  [ "$(ls "$T/r" 2>/dev/null | grep -c '^shard-')" -ge 8 ] && break; sleep 0.05
done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
if [ -e "$T/r/manifest.json" ]; then
  fail resume_killed_midway "pack finished before the kill (machine too fast?)"
else
  pass resume_no_manifest_after_kill
  expect_rc shardset_unfinished 1 "$KEEL" pack --verify "$T/r"
  grep -q "unfinished pack" "$T/err" && pass shardset_unfinished_message || fail shardset_unfinished_message "$(cat "$T/err")"
  expect_rc resume_pack 0 "$KEEL" pack "$T/big" --out "$T/r" --shard-size 32K --threads 2 --json
  grep -q '"shards_reused": [1-9]' "$T/out" && pass resume_reused_shards || fail resume_reused_shards "$(head -c 400 "$T/out")"
  if diff -r -x .pack-state.json "$T/r" "$T/r_ref" >/dev/null; then pass resume_identical; else fail resume_identical "differs from an uninterrupted pack"; fi
fi
ls -a "$T/r" | grep -q 'tmp' && fail resume_no_temp_files "$(ls -a "$T/r")" || pass resume_no_temp_files
