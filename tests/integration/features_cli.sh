# Integration tests of `keel features`: fit → describe → apply (Parquet) on an
# ingested click-log dataset, determinism across runs and thread counts,
# materialize + online transform, and bad input (spec errors with file:line:col,
# unknown columns, type mismatches, tampered features.json, usage errors).
. "$KEEL_SRC/tests/integration/lib.sh"

cd "$T"
"$KEEL" data gen-clicks clicks.csv --rows 20000 --seed 7 >/dev/null || { fail features_gen "gen-clicks failed"; exit 0; }
cat > clicks.yaml <<'EOF'
name: clicks
columns:
  - {name: user_id, type: int64, nullable: false, min: 1}
  - {name: item_price, type: float64, min: 0, max_null_ratio: 0.05}
  - {name: ts, type: timestamp, timezone: UTC, nullable: false}
  - {name: category, type: category, nullable: false, values: [books, toys, home, sports, garden, beauty]}
  - {name: clicked, type: bool, nullable: false}
EOF
"$KEEL" ingest clicks.csv --schema clicks.yaml --out ds >/dev/null 2>&1 || { fail features_ingest "ingest failed: $(cat "$T/err" 2>/dev/null)"; exit 0; }

cat > spec.yaml <<'EOF'
label: {column: clicked, type: bool}
features:
  - {name: price_z, transform: standardize, input: item_price, type: float64, fill: 0}
  - {name: price_log, transform: log1p, input: item_price, type: float64, fill: 0}
  - {name: price_q, transform: bucketize, input: item_price, type: float64, fill: 0, quantiles: 8, dtype: int32}
  - {name: category, transform: onehot, input: category, type: string, max_size: 4}
  - {name: user_bucket, transform: hash_bucket, input: user_id, type: int64, buckets: 1024, dtype: int64}
  - {name: hour, transform: datepart, input: ts, type: timestamp, part: hour}
  - {name: age_h, transform: time_since, input: ts, type: timestamp, since: '2023-11-01T00:00:00Z', unit: h}
  - {name: user_count, transform: window, agg: count, events: 100, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}}
  - {name: cat_gap3, transform: window, agg: mean_interval, events: 3, entity: {column: category, type: string}, time: {column: ts, type: timestamp}, empty: -1}
  - {name: cat_price3, transform: window, agg: mean, events: 3, entity: {column: category, type: string}, time: {column: ts, type: timestamp}, value: {column: item_price, type: float64, fill: 0}}
EOF

json_get() { $PYTHON -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

if expect_rc features_fit 0 "$KEEL" features fit spec.yaml --data ds --out f.json --json; then
  w=$(json_get "$T/out" "d['width']")
  [ "$w" = "14" ] && pass features_fit_width || fail features_fit_width "width $w, expected 14 (one-hot 4 + unknown)"
  h=$(json_get "$T/out" "d['feature_hash']")
  [ "$(json_get f.json "d['feature_hash']")" = "$h" ] && pass features_hash_recorded || fail features_hash_recorded "hash differs"
fi

if expect_rc features_describe 0 "$KEEL" features describe f.json --json; then
  n=$(json_get "$T/out" "sum(1 for f in d['features'] if 'cost_ns_per_row' in f and 'heavy' in f and f['dtype'])")
  [ "$n" = "10" ] && pass features_describe_fields || fail features_describe_fields "got $n features with cost/heavy"
fi
expect_rc features_describe_text 0 "$KEEL" features describe f.json && grep -q "vocab: 4 entries" "$T/out" && pass features_describe_state || fail features_describe_state "$(head -c 300 "$T/out")"

if expect_rc features_apply 0 "$KEEL" features apply f.json --data ds --out out1.parquet --json; then
  [ "$(json_get "$T/out" "d['rows']")" = "20000" ] && pass features_apply_rows || fail features_apply_rows "$(cat "$T/out")"
  u=$(json_get "$T/out" "d['unknown']")
  [ "$u" -gt 0 ] && pass features_unknown_counted || fail features_unknown_counted "unknown=$u (6 categories, max_size 4)"
  "$KEEL" data head out1.parquet > head.txt 2>&1
  grep -q "category=<unknown>" head.txt && grep -q "clicked" head.txt && pass features_apply_columns || fail features_apply_columns "$(head -c 300 head.txt)"
fi
"$KEEL" --threads 1 features apply f.json --data ds --out out2.parquet >/dev/null 2>&1
"$KEEL" --threads 2 features apply f.json --data ds --out out3.parquet >/dev/null 2>&1
s1=$(sha256sum < out1.parquet); s2=$(sha256sum < out2.parquet); s3=$(sha256sum < out3.parquet)
[ "$s1" = "$s2" ] && [ "$s1" = "$s3" ] && pass features_apply_deterministic || fail features_apply_deterministic "outputs differ across runs/threads"

# every output as one FixedSizeList<float32> column: row by row the float32 values of out1's columns
if expect_rc features_apply_list_column 0 "$KEEL" features apply f.json --data ds --out lst.parquet --list-column x; then
  "$KEEL" data head lst.parquet -n 20000 --json > lst.jsonl 2> lst.err
  "$KEEL" data head out1.parquet -n 20000 --json > flat.jsonl 2>> lst.err
  r=$($PYTHON - lst.jsonl flat.jsonl <<'PY'
import json, struct, sys
f32 = lambda v: struct.unpack("f", struct.pack("f", v))[0]
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
bad = [i for i, (x, y) in enumerate(zip(a, b))
       if list(x) != ["x", "clicked"] or x["clicked"] != y["clicked"]
       or [f32(v) for v in x["x"]] != [f32(float(v)) for k, v in y.items() if k != "clicked"]]
print(len(a), len(b), bad[:3])
PY
)
  [ "$r" = "20000 20000 []" ] && pass features_apply_list_column_values || fail features_apply_list_column_values "$r $(head -c 300 lst.err)"
fi
expect_rc features_apply_list_column_folder 2 "$KEEL" features apply f.json --data ds --out lstds --list-column x
grep -q "needs a .parquet --out" "$T/err" && pass features_apply_list_column_folder_msg || fail features_apply_list_column_folder_msg "$(cat "$T/err")"
expect_rc features_apply_list_column_dup 1 "$KEEL" features apply f.json --data ds --out dup.parquet --list-column clicked
grep -q 'duplicate column name "clicked"' "$T/err" && pass features_apply_list_column_dup_msg || fail features_apply_list_column_dup_msg "$(cat "$T/err")"

expect_rc features_apply_dir 0 "$KEEL" features apply f.json --data ds --out fds && [ -f fds/features.parquet ] && [ -f fds/features.json ] \
  && [ -f fds/manifest.json ] && pass features_apply_dir_files || fail features_apply_dir_files "missing fds/features.parquet, features.json or manifest.json"
expect_rc features_apply_dir_validates 0 "$KEEL" data validate fds

# online: materialize the store, then transform a record (windows read the store)
if expect_rc features_materialize 0 "$KEEL" features materialize f.json --data ds --store store.db --json; then
  e=$(json_get "$T/out" "d['entities']")
  [ "$e" -gt 100 ] && pass features_materialize_entities || fail features_materialize_entities "entities=$e"
fi
echo '{"user_id": 5, "item_price": 12.5, "ts": "2024-01-01T10:00:00Z", "category": "books", "clicked": true}' > rec.jsonl
if expect_rc features_transform 0 sh -c "'$KEEL' features transform f.json --store store.db < rec.jsonl"; then
  n=$($PYTHON -c "import json,sys; v=json.loads(open(sys.argv[1]).readline()); print(len(v), v[9], v[12] > 0)" "$T/out")
  [ "$n" = "14 10 True" ] && pass features_transform_vector || fail features_transform_vector "got '$n' from $(head -c 300 "$T/out")"
fi
expect_rc features_transform_needs_store 1 sh -c "'$KEEL' features transform f.json < rec.jsonl"
grep -q "online store" "$T/err" && pass features_transform_needs_store_msg || fail features_transform_needs_store_msg "$(cat "$T/err")"
echo '{"user_id": "x", "item_price": 1, "ts": 0, "category": "books"}' > bad.jsonl
expect_rc features_transform_bad_type 1 sh -c "'$KEEL' features transform f.json --store store.db < bad.jsonl"
grep -q "user_id" "$T/err" && pass features_transform_bad_type_msg || fail features_transform_bad_type_msg "$(cat "$T/err")"

# bad input
sed 's/"mean":[ ]*2/"mean": 3/' f.json > tampered.json
if ! cmp -s f.json tampered.json; then
  expect_rc features_tampered 1 "$KEEL" features apply tampered.json --data ds --out x.parquet
  grep -q "feature_hash mismatch" "$T/err" && pass features_tampered_msg || fail features_tampered_msg "$(cat "$T/err")"
else
  fail features_tampered "could not tamper with f.json"
fi
printf 'features:\n  - name: a\n    transform: standardise\n    input: item_price\n    type: float64\n' > bad.yaml
expect_rc features_spec_error 1 "$KEEL" features fit bad.yaml --data ds --out g.json
grep -q "bad.yaml:3:" "$T/err" && pass features_spec_error_location || fail features_spec_error_location "$(cat "$T/err")"
printf 'features:\n  - {name: a, transform: log1p, input: price, type: float64}\n' > unk.yaml
expect_rc features_unknown_column 1 "$KEEL" features fit unk.yaml --data ds --out g.json
grep -q "'price' not found" "$T/err" && pass features_unknown_column_msg || fail features_unknown_column_msg "$(cat "$T/err")"
printf 'features:\n  - {name: a, transform: log1p, input: category, type: float64}\n' > mism.yaml
expect_rc features_type_mismatch 1 "$KEEL" features fit mism.yaml --data ds --out g.json
grep -q "declares float64" "$T/err" && pass features_type_mismatch_msg || fail features_type_mismatch_msg "$(cat "$T/err")"
printf 'features:\n  - {name: a, transform: log1p, input: item_price, type: float64}\n' > nonull.yaml
expect_rc features_null_not_nullable 1 "$KEEL" features fit nonull.yaml --data ds --out nn.json
grep -q "item_price is null and has no fill" "$T/err" && pass features_null_msg || fail features_null_msg "$(cat "$T/err")"
expect_rc features_usage 2 "$KEEL" features apply f.json
expect_rc features_help 0 "$KEEL" features fit --help
# a training split: fitted on the first half → other state, other hash
if expect_rc features_fit_split 0 "$KEEL" features fit spec.yaml --data ds --train-fraction 0.5 --out half.json --json; then
  [ "$(json_get "$T/out" "d['rows']")" = "10000" ] && [ "$(json_get half.json "d['feature_hash']")" != "$(json_get f.json "d['feature_hash']")" ] \
    && pass features_fit_split_state || fail features_fit_split_state "$(cat "$T/out")"
fi
