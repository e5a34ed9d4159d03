# A dataset version whose part file was replaced by another valid Parquet
# file (issue 22: training succeeded on the 7 rows of the swapped file and
# meta.json recorded the original version): keel train, keel features apply
# and keel eval check every file against manifest.json (sha256 by default,
# --verify size|none) and refuse a mismatch naming the file.
. "$KEEL_SRC/tests/integration/lib.sh"

cd "$T"
"$KEEL" data gen-clicks clicks.csv --rows 3000 --seed 7 >/dev/null || { fail tamper_gen "gen-clicks failed"; exit 0; }
head -8 clicks.csv > small.csv   # header + 7 rows
cat > clicks.yaml <<'YAML'
name: clicks
columns:
  - {name: user_id, type: int64, nullable: false, min: 1}
  - {name: item_price, type: float64, min: 0}
  - {name: ts, type: timestamp, timezone: UTC, nullable: false}
  - {name: category, type: category, nullable: false}
  - {name: clicked, type: bool, nullable: false}
YAML
"$KEEL" ingest clicks.csv --schema clicks.yaml --out ds >/dev/null 2>ingest.err || { fail tamper_ingest "$(cat ingest.err)"; exit 0; }
"$KEEL" ingest small.csv --schema clicks.yaml --out small >/dev/null 2>ingest.err || { fail tamper_ingest "$(cat ingest.err)"; exit 0; }
cat > spec.yaml <<'YAML'
label: {column: clicked, type: bool}
features:
  - {name: price_log, transform: log1p, input: item_price, type: float64, fill: 0}
  - {name: category, transform: onehot, input: category, type: string, max_size: 4}
YAML
cat > model.yaml <<YAML
seed: 1
input: {shape: [6]}
layers:
  - {type: linear, out: 1}
loss: {type: bce_with_logits}
optimizer: {type: sgd, lr: 0.1}
train: {epochs: 1, batch_size: 64}
data: {dataset: $T/feat, label: clicked}
YAML
expect_rc tamper_fit 0 "$KEEL" features fit spec.yaml --data ds --out f.json || exit 0
expect_rc tamper_apply_clean 0 "$KEEL" features apply f.json --data ds --out feat || exit 0
expect_rc tamper_train_clean 0 "$KEEL" train model.yaml --out m0 --quiet

# swap the ingested part file for the 7-row dataset's (valid Parquet, other content)
part=$(ls ds/versions/*/part-00000.parquet)
cp "$part" part.keep
cp small/versions/*/part-00000.parquet "$part"
expect_rc tamper_apply_refused 1 "$KEEL" features apply f.json --data ds --out feat2
grep -q "part-00000.parquet" "$T/err" && grep -q "manifest" "$T/err" && pass tamper_apply_names_file || fail tamper_apply_names_file "$(head -c 400 "$T/err")"
expect_rc tamper_apply_size_refused 1 "$KEEL" features apply f.json --data ds --out feat2 --verify size
expect_rc tamper_apply_no_verify 0 "$KEEL" features apply f.json --data ds --out feat2 --verify none
expect_rc tamper_verify_usage 2 "$KEEL" features apply f.json --data ds --out feat2 --verify md5
cp part.keep "$part"

# the features output is a dataset too: swap its features.parquet
cp feat/features.parquet fp.keep
cp feat2/features.parquet feat/features.parquet
expect_rc tamper_train_refused 1 "$KEEL" train model.yaml --out m1 --quiet
if grep -q "features.parquet: " "$T/err" && grep -q "sha256\|bytes" "$T/err"; then pass tamper_train_names_file; else fail tamper_train_names_file "$(head -c 400 "$T/err")"; fi
[ ! -f m1/meta.json ] && pass tamper_train_no_model || fail tamper_train_no_model "m1/meta.json written"
expect_rc tamper_eval_refused 1 "$KEEL" eval m0 --json
grep -q "features.parquet" "$T/err" && pass tamper_eval_names_file || fail tamper_eval_names_file "$(head -c 400 "$T/err")"
expect_rc tamper_train_no_verify 0 "$KEEL" train model.yaml --out m2 --quiet --verify none
cp fp.keep feat/features.parquet
# same size, one byte changed: sha256 sees it, size does not
$PYTHON - feat/features.parquet <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 1; open(p, "wb").write(b)
PY
expect_rc tamper_train_byte_refused 1 "$KEEL" train model.yaml --out m3 --quiet
grep -q "sha256 [0-9a-f]\{64\} ([0-9]* bytes), the manifest .* says [0-9a-f]\{64\}" "$T/err" && pass tamper_train_expected_actual || fail tamper_train_expected_actual "$(head -c 400 "$T/err")"
cp fp.keep feat/features.parquet
expect_rc tamper_train_restored 0 "$KEEL" train model.yaml --out m4 --quiet
exit 0
