# Integration tests of `keel ingest`, `keel schema` and `keel data`: a generated
# click log end to end, rejects and failure-publishes-nothing, idempotent
# re-runs, kill -9 then re-run gives identical hashes, write failures leave
# nothing behind, partitioning, compressed sources, JSONL, bad inputs.
. "$KEEL_SRC/tests/integration/lib.sh"

cd "$T"
"$KEEL" data gen-clicks clicks.csv --rows 50000 --seed 7 || { fail ingest_gen "gen-clicks failed"; exit 0; }
cat > clicks.yaml <<'EOF'
name: clicks
columns:
  - {name: user_id, type: int64, nullable: false, min: 1}
  - {name: item_price, type: float64, min: 0, max_null_ratio: 0.05}
  - {name: ts, type: timestamp, timezone: UTC, nullable: false}
  - {name: category, type: category, nullable: false, values: [books, toys, home, sports, garden, beauty]}
  - {name: clicked, type: bool, nullable: false}
EOF

src_sha_before=$(sha256sum clicks.csv | cut -d' ' -f1)
json_get() { $PYTHON -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
tree_hashes() { (cd "$1" && find . -type f ! -name '.*' | LC_ALL=C sort | xargs sha256sum); }

# ---- basic ingest + validate ----
if expect_rc ingest_clicks_ok 0 "$KEEL" ingest clicks.csv --schema clicks.yaml --out ds --json; then
  id=$(json_get "$T/out" "d['version_id']")
  m="ds/versions/$id/manifest.json"
  [ "$(cat ds/current)" = "$id" ] && pass ingest_current_pointer || fail ingest_current_pointer "current=$(cat ds/current)"
  rows=$(json_get "$m" "d['rows']['accepted']")
  [ "$rows" = 50000 ] && pass ingest_manifest_rows || fail ingest_manifest_rows "rows=$rows"
  src_sha=$(sha256sum clicks.csv | cut -d' ' -f1)
  [ "$(json_get "$m" "d['sources'][0]['sha256']")" = "$src_sha" ] && pass ingest_manifest_source_sha || fail ingest_manifest_source_sha "mismatch"
  ok=1
  for f in $(json_get "$m" "' '.join(k+':'+x['sha256'] for k, x in d['files'].items())"); do
    [ "$(sha256sum "ds/versions/$id/${f%%:*}" | cut -d' ' -f1)" = "${f##*:}" ] || ok=0
  done
  [ $ok = 1 ] && pass ingest_manifest_file_hashes || fail ingest_manifest_file_hashes "a file hash differs"
  nulls=$(json_get "$m" "[c for c in d['columns'] if c['name']=='item_price'][0]['nulls']")
  [ "$nulls" -gt 0 ] && pass ingest_manifest_column_stats || fail ingest_manifest_column_stats "nulls=$nulls"
  expect_rc ingest_data_validate 0 "$KEEL" data validate ds
  expect_rc ingest_data_head 0 "$KEEL" data head ds -n 3 --json
  [ "$(wc -l < "$T/out")" = 3 ] && pass ingest_data_head_rows || fail ingest_data_head_rows "$(cat "$T/out")"
  if expect_rc ingest_data_stats 0 "$KEEL" data stats ds --json; then
    # the vector scan's statistics agree with the ingest's (rows, nulls, string min/max)
    why=$($PYTHON - "$T/out" "$m" <<'PY'
import json, sys
s, m = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
mc = {c["name"]: c for c in m["columns"]}
for c in s["columns"]:
    r = mc[c["name"]]
    if (c["rows"], c["nulls"]) != (r["rows"], r["nulls"]):
        print(c["name"], "rows/nulls", c["rows"], c["nulls"], "manifest", r["rows"], r["nulls"])
    if c["type"] == "string" and (c["min"], c["max"]) != (r.get("min"), r.get("max")):
        print(c["name"], "min/max", c["min"], c["max"], "manifest", r["min"], r["max"])
PY
)
    [ -z "$why" ] && pass ingest_data_stats_match_manifest || fail ingest_data_stats_match_manifest "$why"
  fi
  if expect_rc ingest_data_groupby 0 "$KEEL" data groupby ds --by category --sum item_price --json; then
    # count(*), count, sum, min, max by category against the source CSV
    why=$($PYTHON - "$T/out" clicks.csv <<'PY'
import csv, json, sys
g = {x["key"]: x for x in json.load(open(sys.argv[1]))["groups"]}
ref = {}
for row in csv.DictReader(open(sys.argv[2])):
    r = ref.setdefault(row["category"], [0, 0, 0.0, None, None])
    r[0] += 1
    if row["item_price"] not in ("", "NA", "null"):
        v = float(row["item_price"]); r[1] += 1; r[2] += v
        r[3] = v if r[3] is None else min(r[3], v); r[4] = v if r[4] is None else max(r[4], v)
if set(g) != set(ref): print("keys", sorted(g), sorted(ref))
for k, (n, c, s, mn, mx) in ref.items():
    x = g.get(k)
    if x and (x["rows"], x["count"], x["min"], x["max"]) != (n, c, mn, mx) or x and abs(x["sum"] - s) > 1e-6 * abs(s):
        print(k, x, (n, c, s, mn, mx))
PY
)
    [ -z "$why" ] && pass ingest_data_groupby_values || fail ingest_data_groupby_values "$why"
  fi
  expect_rc ingest_data_groupby_float_key 1 "$KEEL" data groupby ds --by item_price
  grep -q "cannot be a group key" "$T/err" && pass ingest_data_groupby_float_key_message || fail ingest_data_groupby_float_key_message "$(head -c 300 "$T/err")"
  expect_rc ingest_data_show 0 "$KEEL" data show ds
  expect_rc ingest_data_report 0 "$KEEL" data report ds --out report.html
  grep -q "<svg" report.html && grep -q "Null ratios" report.html && pass ingest_report_html || fail ingest_report_html "no svg"

  # ---- a concurrent run of the same ingest is refused ----
  key=$(json_get "$m" "d['ingest_key']")
  mkdir -p dlock/.staging
  flock -o dlock/.staging/$key.lock sleep 10 & lp=$!
  sleep 0.3
  expect_rc ingest_concurrent_refused 1 "$KEEL" ingest clicks.csv --schema clicks.yaml --out dlock
  grep -q "another ingest" "$T/err" && pass ingest_concurrent_message || fail ingest_concurrent_message "$(head -c 300 "$T/err")"
  kill $lp 2>/dev/null; wait $lp 2>/dev/null

  # ---- idempotent re-run ----
  if expect_rc ingest_rerun_ok 0 "$KEEL" ingest clicks.csv --schema clicks.yaml --out ds --json; then
    [ "$(json_get "$T/out" "d['version_id']")" = "$id" ] && [ "$(json_get "$T/out" "d['reused']")" = True ] &&
      [ "$(ls ds/versions | wc -l)" = 1 ] && pass ingest_rerun_noop || fail ingest_rerun_noop "$(cat "$T/out")"
  fi

  # ---- tampering is detected ----
  cp -r ds ds_t
  f=$(ls ds_t/versions/$id/*.parquet | head -1)
  printf 'x' >> "$f"
  expect_rc ingest_validate_detects_tamper 1 "$KEEL" data validate ds_t
  grep -q "sha256" "$T/err" && pass ingest_validate_tamper_msg || fail ingest_validate_tamper_msg "$(head -c 300 "$T/err")"

  # ---- the release keel never reads test hooks; keel-hooks (the test build) does ----
  if KEEL_TEST_KILL_AFTER_FILES=1 "$KEEL" ingest clicks.csv --schema clicks.yaml --out dhook --chunk-size 256K >/dev/null 2>&1; then
    pass ingest_release_ignores_test_hook; else fail ingest_release_ignores_test_hook "keel exit $? with KEEL_TEST_KILL_AFTER_FILES set"; fi
  rm -rf dhook
  # ---- kill -9 after the first finished file, re-run: identical to a clean run ----
  ref_hashes=$(tree_hashes "ds/versions/$id")
  KEEL_TEST_KILL_AFTER_FILES=1 "$KEEL_HOOKS" ingest clicks.csv --schema clicks.yaml --out dk --chunk-size 256K >/dev/null 2>&1
  krc=$?
  [ $krc = 137 ] && pass ingest_killed_midway || fail ingest_killed_midway "exit $krc (expected SIGKILL)"
  [ ! -e dk/current ] && pass ingest_killed_publishes_nothing || fail ingest_killed_publishes_nothing "current exists"
  if expect_rc ingest_resume_after_kill 0 "$KEEL" ingest clicks.csv --schema clicks.yaml --out dk --chunk-size 256K --json; then
    [ "$(json_get "$T/out" "d['partitions_reused']")" -ge 1 ] && pass ingest_resume_reuses_files || fail ingest_resume_reuses_files "$(cat "$T/out")"
    id2=$(json_get "$T/out" "d['version_id']")
    "$KEEL" ingest clicks.csv --schema clicks.yaml --out dclean --chunk-size 256K > /dev/null 2>&1
    [ "$(tree_hashes "dk/versions/$id2")" = "$(tree_hashes "dclean/versions/$(cat dclean/current)")" ] &&
      [ "$id2" = "$(cat dclean/current)" ] && pass ingest_resume_identical_hashes || fail ingest_resume_identical_hashes "differs"
    [ -z "$(find dk/versions -name '.*')" ] && pass ingest_resume_no_temp_files || fail ingest_resume_no_temp_files "$(find dk/versions -name '.*')"
  fi
  # a kill at an arbitrary moment (timer), then re-run
  ( "$KEEL" ingest clicks.csv --schema clicks.yaml --out dk2 --chunk-size 256K >/dev/null 2>&1 & p=$!; sleep 0.15; kill -9 $p 2>/dev/null; wait $p 2>/dev/null )
  "$KEEL" ingest clicks.csv --schema clicks.yaml --out dk2 --chunk-size 256K >/dev/null 2>&1
  [ -f dk2/current ] && [ "$(tree_hashes "dk2/versions/$(cat dk2/current)")" = "$(tree_hashes "dclean/versions/$(cat dclean/current)")" ] &&
    pass ingest_timed_kill_identical || fail ingest_timed_kill_identical "differs"
  # same content, any thread count
  "$KEEL" --threads 1 ingest clicks.csv --schema clicks.yaml --out d1t >/dev/null 2>&1
  [ "$(cat d1t/current 2>/dev/null)" = "$id" ] && [ "$(tree_hashes "d1t/versions/$id")" = "$ref_hashes" ] &&
    pass ingest_deterministic_threads || fail ingest_deterministic_threads "1-thread version differs"
fi

# ---- write failure (file size limit: EFBIG, as ENOSPC would) leaves nothing behind ----
( trap '' XFSZ; ulimit -f 200; "$KEEL" ingest clicks.csv --schema clicks.yaml --out dfull > out.full 2> err.full ); frc=$?
[ $frc = 1 ] && pass ingest_write_failure_fails || fail ingest_write_failure_fails "exit $frc: $(head -c 300 err.full)"
[ ! -e dfull ] && pass ingest_write_failure_leaves_nothing || fail ingest_write_failure_leaves_nothing "$(find dfull | head)"
# a real full disk: a 64 KiB tmpfs in a private mount namespace (unshare -rm:
# root, or an unprivileged user namespace); the source stays outside it
mkdir -p small
src_sha=$(sha256sum clicks.csv)
unshare -rm sh -c 'mount -t tmpfs -o size=64k keeltest "$1" || exit 99
  "$2" ingest clicks.csv --schema clicks.yaml --out "$1/ds" > out.enospc 2> err.enospc; echo $? > rc.enospc
  ls -A "$1" > left.enospc' sh "$PWD/small" "$KEEL" > ns.enospc 2>&1
if [ ! -s rc.enospc ]; then
  fail ingest_enospc_fails "cannot make a small tmpfs here (unshare -rm + mount -t tmpfs): $(head -c 200 ns.enospc)"
else
  erc=$(cat rc.enospc)
  [ "$erc" = 1 ] && grep -q "No space left on device" err.enospc && pass ingest_enospc_fails ||
    fail ingest_enospc_fails "exit $erc: $(head -c 300 err.enospc)"
  [ ! -s left.enospc ] && pass ingest_enospc_leaves_nothing || fail ingest_enospc_leaves_nothing "left on the full filesystem: $(head -c 200 left.enospc)"
fi
[ "$(sha256sum clicks.csv)" = "$src_sha" ] && pass ingest_enospc_source_untouched || fail ingest_enospc_source_untouched "clicks.csv changed"

# ---- rejects ----
$PYTHON - <<'EOF'
lines = open("clicks.csv").read().split("\n")
lines[1041] = "12,N/A,2023-11-01 00:00:01,books,0"       # line 1042
lines[2000] = "13,1.5,2023-11-01 00:00:01,books"          # ragged
lines[3000] = "14,2.5,2023-11-01 00:00:01,cars,1"         # not an allowed value
lines[4000] = "99999999999999999999,2.5,2023-11-01 00:00:01,toys,1"  # overflow
lines[4500] = "15,2.5,2023-11-01 00:00:01,to\xffys,1"     # invalid UTF-8 (written as latin-1 below)
open("bad.csv", "w", encoding="latin-1").write("\n".join(lines))
EOF
expect_rc ingest_rejects_fail_by_default 1 "$KEEL" ingest bad.csv --schema clicks.yaml --out dbad --rejects bad.rejects.jsonl
grep -q "bad.csv:1042: column item_price: 'N/A' is not a float64" "$T/err" && pass ingest_reject_message || fail ingest_reject_message "$(head -c 600 "$T/err")"
grep -q "ragged" "$T/err" && grep -q "range" "$T/err" && grep -q "allowed" "$T/err" && grep -q "utf8" "$T/err" &&
  pass ingest_reject_summary_kinds || fail ingest_reject_summary_kinds "$(head -c 600 "$T/err")"
[ ! -e dbad ] && pass ingest_failure_publishes_nothing || fail ingest_failure_publishes_nothing "dbad exists"
[ "$(wc -l < bad.rejects.jsonl)" = 5 ] && pass ingest_failed_rejects_file || fail ingest_failed_rejects_file "$(wc -l < bad.rejects.jsonl)"
if expect_rc ingest_rejects_within_ratio 0 "$KEEL" ingest bad.csv --schema clicks.yaml --out dbad --max-reject-ratio 0.001 --json; then
  v=$(json_get "$T/out" "d['path']")
  $PYTHON - "$v/rejects.jsonl" <<'EOF' && pass ingest_rejects_jsonl || fail ingest_rejects_jsonl "bad rejects file"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert len(r) == 5, r
a = r[0]
assert a["line"] == 1042 and a["column"] == "item_price" and a["kind"] == "type" and a["raw"].startswith("12,N/A"), a
assert a["offset"] == sum(len(l) + 1 for l in open("bad.csv", encoding="latin-1").read().split("\n")[:1041]), a
EOF
fi

# ---- null ratio ----
sed 's/max_null_ratio: 0.05/max_null_ratio: 0.001/' clicks.yaml > strict.yaml
expect_rc ingest_null_ratio_fails 1 "$KEEL" ingest clicks.csv --schema strict.yaml --out dnull
grep -q "null ratio" "$T/err" && grep -q "strict.yaml:4:" "$T/err" && pass ingest_null_ratio_message || fail ingest_null_ratio_message "$(head -c 300 "$T/err")"

# ---- unique ----
printf 'id,name\n1,a\n2,b\n1,c\n' > u.csv
printf 'columns:\n  - {name: id, type: int32, unique: true}\n  - {name: name, type: string}\n' > u.yaml
expect_rc ingest_unique_rejects 1 "$KEEL" ingest u.csv --schema u.yaml --out du
grep -q "u.csv:4: column id: duplicate value" "$T/err" && pass ingest_unique_message || fail ingest_unique_message "$(head -c 300 "$T/err")"

# ---- partitioning ----
if expect_rc ingest_partition_by_ts 0 "$KEEL" ingest clicks.csv --schema clicks.yaml --out dp --partition-by ts --json; then
  v=$(json_get "$T/out" "d['path']")
  [ -f "$v/ts=2023-11-01/part-00000.parquet" ] && pass ingest_partition_layout || fail ingest_partition_layout "$(ls "$v")"
  expect_rc ingest_partition_validate 0 "$KEEL" data validate dp
fi
expect_rc ingest_partition_by_category 0 "$KEEL" ingest clicks.csv --schema clicks.yaml --out dpc --partition-by category --codec snappy
expect_rc ingest_partition_bad_column 1 "$KEEL" ingest clicks.csv --schema clicks.yaml --out dpx --partition-by clicked

# ---- compressed sources, folders, globs ----
mkdir -p srcdir && head -20001 clicks.csv > srcdir/a.csv && (head -1 clicks.csv; tail -n +20002 clicks.csv) > srcdir/b.csv
gzip -c srcdir/b.csv > b.csv.gz
expect_rc ingest_gz_source 0 "$KEEL" ingest b.csv.gz --schema clicks.yaml --out dgz --codec gzip
zstd -q -c srcdir/b.csv > b.csv.zst 2>/dev/null && expect_rc ingest_zst_source 0 "$KEEL" ingest b.csv.zst --schema clicks.yaml --out dzst --codec none
if expect_rc ingest_folder_source 0 "$KEEL" ingest srcdir --schema clicks.yaml --out ddir --json; then
  [ "$(json_get "$T/out" "d['rows_accepted']")" = 50000 ] && pass ingest_folder_rows || fail ingest_folder_rows "$(cat "$T/out")"
fi
expect_rc ingest_glob_source 0 "$KEEL" ingest "srcdir/*.csv" --schema clicks.yaml --out dglob
head -c 300000 b.csv.gz > trunc.csv.gz
expect_rc ingest_truncated_gz 1 "$KEEL" ingest trunc.csv.gz --schema clicks.yaml --out dtr
grep -qi "truncated\|gzip" "$T/err" && [ ! -e dtr ] && pass ingest_truncated_gz_message || fail ingest_truncated_gz_message "$(head -c 300 "$T/err")"
# decompression bombs: ~1 GiB of CSV in a ~1 MB multi-member gzip is refused by the
# expansion cap, and a zstd one by the size cap, naming the file and the cap, in bounded memory
$PYTHON - <<'PYEOF'
import zlib
line = b"1234567890123456789,1.5,2023-11-01 00:00:00,books,0\n"
body = line * (8 * 1024 * 1024 // len(line))
c = zlib.compressobj(9, zlib.DEFLATED, 31)
member = c.compress(body) + c.flush()
hc = zlib.compressobj(9, zlib.DEFLATED, 31)
with open("bomb.csv.gz", "wb") as f:
    f.write(hc.compress(b"user_id,item_price,ts,category,clicked\n") + hc.flush())
    for _ in range(128):
        f.write(member)
PYEOF
if /usr/bin/time -v -o bomb.time "$KEEL" ingest bomb.csv.gz --schema clicks.yaml --out dbomb --max-expansion 100 >"$T/out" 2>"$T/err"; then
  fail ingest_gz_bomb_refused "the bomb was ingested"
else
  grep -q "bomb.csv.gz" "$T/err" && grep -q -- "--max-expansion" "$T/err" && [ ! -e dbomb/versions ] \
    && pass ingest_gz_bomb_refused || fail ingest_gz_bomb_refused "$(head -c 300 "$T/err")"
fi
rss_kb=$(awk -F: '/Maximum resident/ {gsub(/ /, "", $2); print $2}' bomb.time)
[ -n "$rss_kb" ] && [ "$rss_kb" -lt 400000 ] && pass ingest_gz_bomb_bounded_rss || fail ingest_gz_bomb_bounded_rss "max RSS ${rss_kb:-?} kB"
if command -v zstd >/dev/null; then
  (head -1 clicks.csv; yes "1234567890123456789,1.5,2023-11-01 00:00:00,books,0" | head -c 300000000) | zstd -q -3 -c > bomb.csv.zst
  expect_rc ingest_zst_bomb_size_cap 1 "$KEEL" ingest bomb.csv.zst --schema clicks.yaml --out dbombz --max-decompressed 64M --max-expansion 1e9
  grep -q "bomb.csv.zst" "$T/err" && grep -q -- "--max-decompressed" "$T/err" && grep -q "64.0 MiB" "$T/err" \
    && pass ingest_zst_bomb_size_cap_message || fail ingest_zst_bomb_size_cap_message "$(head -c 300 "$T/err")"
fi
expect_rc ingest_gz_under_caps 0 "$KEEL" ingest b.csv.gz --schema clicks.yaml --out dgz2 --max-decompressed 64M --max-expansion 20
expect_rc ingest_sha256_mismatch 1 "$KEEL" ingest clicks.csv --schema clicks.yaml --out dsha --sha256 "$(printf '0%.0s' $(seq 64))"
grep -q "sha256 mismatch" "$T/err" && pass ingest_sha256_message || fail ingest_sha256_message "$(head -c 300 "$T/err")"
expect_rc ingest_sha256_match 0 "$KEEL" ingest clicks.csv --schema clicks.yaml --out dsha --sha256 "$(sha256sum clicks.csv | cut -d' ' -f1)"

# ---- JSONL ----
$PYTHON - <<'EOF'
import csv, json
with open("clicks.csv") as f, open("c.jsonl", "w") as o:
    for i, r in enumerate(csv.DictReader(f)):
        if i >= 1000: break
        o.write(json.dumps({"user_id": int(r["user_id"]), "item_price": float(r["item_price"]) if r["item_price"] else None,
                            "ts": r["ts"], "category": r["category"], "clicked": r["clicked"] == "1"}) + "\n")
    o.write('{"user_id": 5, "item_price": "cheap", "ts": "2023-11-01", "category": "toys", "clicked": true}\n')
    o.write('{"user_id": 6, oops}\n')
EOF
expect_rc ingest_jsonl_rejects 1 "$KEEL" ingest c.jsonl --schema clicks.yaml --out dj
grep -q "c.jsonl:1001: column item_price: 'cheap' is not a float64" "$T/err" && grep -q "c.jsonl:1002: malformed JSON" "$T/err" &&
  pass ingest_jsonl_messages || fail ingest_jsonl_messages "$(head -c 400 "$T/err")"
expect_rc ingest_jsonl_ok 0 "$KEEL" ingest c.jsonl --schema clicks.yaml --out dj --max-reject-ratio 0.01

# ---- dialects and bad input ----
printf '\xef\xbb\xbfid;name\r\n1;"a;b"\r\n2;"multi\r\nline"\r\n' > bom.csv
printf 'dialect: {delimiter: ";"}\ncolumns:\n  - {name: id, type: int32}\n  - {name: name, type: string}\n' > bom.yaml
expect_rc ingest_bom_crlf_quoted 0 "$KEEL" ingest bom.csv --schema bom.yaml --out dbom
"$KEEL" data head dbom --json > bom.out 2>&1
grep -q '"multi\\r\\nline"' bom.out && grep -q '"a;b"' bom.out && pass ingest_bom_crlf_values || fail ingest_bom_crlf_values "$(cat bom.out)"
: > empty.csv
expect_rc ingest_empty_file 1 "$KEEL" ingest empty.csv --schema u.yaml --out de
grep -q "empty.csv: empty file" "$T/err" && pass ingest_empty_message || fail ingest_empty_message "$(head -c 300 "$T/err")"
printf 'id,name\n' > hdr.csv
expect_rc ingest_header_only 1 "$KEEL" ingest hdr.csv --schema u.yaml --out dh
grep -q "no data rows" "$T/err" && pass ingest_header_only_message || fail ingest_header_only_message "$(head -c 300 "$T/err")"
printf 'id,name\n1,"open\n2,b\n' > q.csv
expect_rc ingest_unbalanced_quote 1 "$KEEL" ingest q.csv --schema u.yaml --out dq
grep -q "q.csv:2: unterminated quoted field" "$T/err" && pass ingest_unbalanced_quote_message || fail ingest_unbalanced_quote_message "$(head -c 300 "$T/err")"
printf 'id,other\n1,2\n' > mis.csv
expect_rc ingest_missing_column 1 "$KEEL" ingest mis.csv --schema u.yaml --out dm
grep -q "column 'name' of the schema is missing from the header" "$T/err" && pass ingest_missing_column_message || fail ingest_missing_column_message "$(head -c 300 "$T/err")"
$PYTHON -c "
open('long.csv','w').write('id,name\n1,' + 'x'*(11<<20) + '\n2,b\n')"
expect_rc ingest_long_line 1 "$KEEL" ingest long.csv --schema u.yaml --out dl
grep -q "long.csv:2: record longer than 10485760 bytes" "$T/err" && pass ingest_long_line_message || fail ingest_long_line_message "$(head -c 300 "$T/err")"
[ "$(sha256sum clicks.csv | cut -d' ' -f1)" = "$src_sha_before" ] && [ "$(cat u.csv)" = "$(printf 'id,name\n1,a\n2,b\n1,c')" ] &&
  pass ingest_source_untouched || fail ingest_source_untouched "a source file changed"
printf 'columns:\n  - name: a\n    type: flaot64\n' > badschema.yaml
expect_rc ingest_schema_error 1 "$KEEL" ingest u.csv --schema badschema.yaml --out dx
grep -q "badschema.yaml:3:11" "$T/err" && pass ingest_schema_error_position || fail ingest_schema_error_position "$(head -c 300 "$T/err")"
expect_rc ingest_usage_no_schema 2 "$KEEL" ingest u.csv --out dx

# ---- schema infer ----
if expect_rc ingest_schema_infer 0 "$KEEL" schema infer clicks.csv --out inferred.yaml; then
  grep -q "type: timestamp" inferred.yaml && grep -q "type: category" inferred.yaml && grep -q "type: float64" inferred.yaml &&
    pass ingest_schema_infer_types || fail ingest_schema_infer_types "$(cat inferred.yaml)"
  expect_rc ingest_with_inferred_schema 0 "$KEEL" ingest clicks.csv --schema inferred.yaml --out dinf
fi
printf 'a\tb\n1\tx\n2\ty\n' > t.tsv
"$KEEL" schema infer t.tsv > t.yaml 2>&1
grep -q 'delimiter: "\\t"' t.yaml && pass ingest_schema_infer_tsv || fail ingest_schema_infer_tsv "$(cat t.yaml)"

# ---- chunk splitting is safe with quoted newlines and delimiters ----
$PYTHON - <<'PYEOF'
import random
random.seed(5)
with open("q.csv", "w", newline="") as f:
    f.write("id,text,n\n")
    for i in range(20000):
        t = random.choice(['plain', '"has,comma"', '"line1\nline2"', '"quote "" inside"', '"\n,\n"', '""', '"x\r\ny"'])
        f.write(f"{i},{t},{i * 3}\n")
PYEOF
printf 'columns:\n  - {name: id, type: int64, unique: true}\n  - {name: text, type: string, nullable: true}\n  - {name: n, type: int64}\n' > q.yaml
if expect_rc ingest_quoted_small_chunks 0 "$KEEL" ingest q.csv --schema q.yaml --out dqs --chunk-size 4K --json &&
   expect_rc ingest_quoted_one_chunk 0 "$KEEL" ingest q.csv --schema q.yaml --out dq1 --chunk-size 64M; then
  "$KEEL" data head dqs -n 100000 --json > qs.out; "$KEEL" data head dq1 -n 100000 --json > q1.out
  [ "$(wc -l < qs.out)" = 20000 ] && cmp -s qs.out q1.out && pass ingest_quoted_chunking_identical || fail ingest_quoted_chunking_identical "$(wc -l < qs.out) rows; differs: $(cmp qs.out q1.out)"
  $PYTHON - <<'PYEOF' && pass ingest_quoted_values || fail ingest_quoted_values "values differ from Python's csv module"
import csv, json
ref = list(csv.DictReader(open("q.csv", newline="")))
got = [json.loads(l) for l in open("qs.out")]
assert len(ref) == len(got)
for r, g in zip(ref, got):
    assert int(r["id"]) == g["id"] and int(r["n"]) == g["n"], (r, g)
    assert (g["text"] if g["text"] is not None else "") == r["text"], (r, g)
PYEOF
  gzip -c q.csv > q.csv.gz
  if expect_rc ingest_quoted_gz_small_chunks 0 "$KEEL" ingest q.csv.gz --schema q.yaml --out dqgz --chunk-size 4K; then
    "$KEEL" data head dqgz -n 100000 --json > qgz.out
    cmp -s qgz.out qs.out && pass ingest_quoted_gz_identical || fail ingest_quoted_gz_identical "$(cmp qgz.out qs.out)"
  fi
fi

# ---- data stats keeps int64 and timestamp extremes exact (no double) ----
printf 'id,ts\n9223372036854775807,9999-12-31T23:59:59.999999Z\n-9223372036854775808,0001-01-01T00:00:00Z\n9007199254740993,2023-01-01T00:00:00Z\n' > big.csv
printf 'columns:\n  - {name: id, type: int64}\n  - {name: ts, type: timestamp, timezone: UTC}\n' > big.yaml
if expect_rc ingest_int64_extremes 0 "$KEEL" ingest big.csv --schema big.yaml --out dbig; then
  "$KEEL" data stats dbig > big.txt 2>&1
  grep -q '9999-12-31T23:59:59.999999Z' big.txt && grep -q ' 9223372036854775807 ' big.txt && grep -q -- '-9223372036854775808' big.txt \
    && pass ingest_stats_extremes_exact || fail ingest_stats_extremes_exact "$(cat big.txt)"
  "$KEEL" data stats dbig --json > big.json 2>&1
  $PYTHON - <<'PYEOF' && pass ingest_stats_extremes_exact_json || fail ingest_stats_extremes_exact_json "$(cat big.json)"
import json
c = {x["name"]: x for x in json.load(open("big.json"))["columns"]}
assert c["id"]["min"] == "-9223372036854775808" and c["id"]["max"] == "9223372036854775807", c["id"]
assert c["ts"]["max"] == "9999-12-31T23:59:59.999999Z" and c["ts"]["min"] == "0001-01-01T00:00:00.000000Z", c["ts"]
PYEOF
fi

# ---- JSONL \u0000 in a string: kept whole (Parquet, head, stats, manifest vocabulary) ----
printf '{"id": 1, "s": "a\\u0000b", "c": "x\\u0000y"}\n{"id": 2, "s": "z", "c": "x"}\n' > nul.jsonl
printf 'columns:\n  - {name: id, type: int64}\n  - {name: s, type: string}\n  - {name: c, type: category}\n' > nul.yaml
if expect_rc ingest_jsonl_nul 0 "$KEEL" ingest nul.jsonl --schema nul.yaml --out dnul; then
  "$KEEL" data head dnul --json > nul.out 2>&1
  grep -qF '"s": "a\u0000b"' nul.out && grep -qF '"c": "x\u0000y"' nul.out \
    && pass ingest_jsonl_nul_head_whole || fail ingest_jsonl_nul_head_whole "$(cat nul.out)"
  "$KEEL" data stats dnul --json > nuls.out 2>&1
  grep -qF '"min": "a\u0000b"' nuls.out && pass ingest_jsonl_nul_stats_whole || fail ingest_jsonl_nul_stats_whole "$(cat nuls.out)"
  "$KEEL" data show dnul --json > nulm.out 2>&1
  $PYTHON -c "import json; d=json.load(open('nulm.out')); v=[c for c in d['manifest']['columns'] if c['name']=='c'][0]['vocabulary']; assert v == ['x', 'x\x00y'], v" \
    && pass ingest_jsonl_nul_vocabulary_whole || fail ingest_jsonl_nul_vocabulary_whole "$(head -c 600 nulm.out)"
fi

# ---- schema infer on garbage (invalid UTF-8, YAML-special names) writes YAML that loads ----
printf 'bad\377\376,"a""b","k: v","- dash","# hash","two\nlines",ok\n1,x\377,y,z,w,v,u\n2,x,y,z,w,v,u\n' > garbage.csv
if expect_rc ingest_schema_infer_garbage 0 "$KEEL" schema infer garbage.csv --out garbage.yaml; then
  expect_rc ingest_schema_infer_garbage_loads 0 "$KEEL" schema check garbage.yaml
fi

# ---- a folder of 60 compressed sources under a 32-descriptor limit: one decoder at a time ----
mkdir -p manyz
for i in $(seq 1 60); do (head -1 clicks.csv; sed -n "$((i * 10 + 2)),$((i * 10 + 11))p" clicks.csv) | gzip -c > manyz/p$(printf %03d "$i").csv.gz; done
if (ulimit -n 32; "$KEEL" ingest manyz --schema clicks.yaml --out dmanyz --json > manyz.out 2> manyz.err); then
  [ "$(json_get manyz.out "d['rows_accepted']")" = 600 ] && pass ingest_many_compressed_sources || fail ingest_many_compressed_sources "$(cat manyz.out)"
else
  fail ingest_many_compressed_sources "$(head -c 300 manyz.err)"
fi
# ---- schema infer by majority, over the whole file ----
$PYTHON - <<'P' > majority.csv
print("x,when")
for i in range(6000):
    print("%s,%s" % ("oops" if i == 4321 else "NA" if i % 50 == 0 else "%d.5" % i, "2024-01-02T03:04:05-05:00"))
P
if expect_rc ingest_schema_infer_scan_full 0 "$KEEL" schema infer majority.csv --scan full --out maj.yaml; then
  grep -q "type: float64" maj.yaml && grep -q "line 4323 'oops'" maj.yaml && grep -q "inferred from all 6000 records" maj.yaml \
    && grep -q 'null: \["", "NA"\]' maj.yaml && pass ingest_schema_infer_majority || fail ingest_schema_infer_majority "$(cat maj.yaml)"
  expect_rc ingest_majority_one_reject 0 "$KEEL" ingest majority.csv --schema maj.yaml --out dmaj --max-reject-ratio 0.001 &&
    grep -q "5999 rows accepted, 1 rejected" "$T/out" && pass ingest_majority_rejects_the_minority \
    || fail ingest_majority_rejects_the_minority "$(cat "$T/out" "$T/err" | head -c 400)"
fi
"$KEEL" schema infer majority.csv --rows 100 | grep -q "inferred from a sample: the first 100 records" \
  && pass ingest_schema_infer_says_sample || fail ingest_schema_infer_says_sample
expect_rc ingest_schema_infer_scan_usage 2 "$KEEL" schema infer majority.csv --scan everything
exit 0
