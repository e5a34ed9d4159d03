#!/usr/bin/env bash
# keel pipeline end to end at test size (examples/clicks on a 20,000-row click
# log): make quickstart without the server, the test AUC against the
# generator's Bayes-optimal AUC, caching (a second run skips every stage),
# --only / --from / --force, a feature-spec change re-running features and
# everything after it (nothing before), a failing stage with earlier outputs
# kept and the re-run resuming there, the lineage in the experiment store,
# keel eval on the Parquet test split, training-data errors naming the
# column, and the optional serve stage (ready, :predict, SIGHUP, SIGTERM).
. "$KEEL_SRC/tests/integration/lib.sh"
BUILD=$(dirname "$KEEL")
# states of the stages from a --json summary: "ingest=cached validate=cached ..."
states() { $PYTHON -c 'import json,sys; j=json.load(open(sys.argv[1])); print(" ".join("%s=%s" % (k, v["state"]) for k, v in j["stages"].items() if k != "serve"))' "$1"; }
want_states() { # NAME FILE EXPECTED
  local got; got=$(states "$2" 2>&1)
  if [ "$got" = "$3" ]; then pass "$1"; else fail "$1" "got '$got', expected '$3'"; fi
}

# ---- quickstart (no server): gen-clicks -> pipeline, AUC within 0.02 of Bayes
QS="$T/qs"
if KEEL_QUICKSTART_NO_SERVE=1 KEEL_QUICKSTART_ROWS=20000 KEEL_QUICKSTART_DIR="$QS" bash "$KEEL_SRC/tools/quickstart.sh" "$BUILD" > "$T/qs.out" 2>&1; then
  pass pipeline_quickstart_no_serve
else
  fail pipeline_quickstart_no_serve "$(tail -c 600 "$T/qs.out")"
fi
OUT="$QS/out"
if grep -q "^test AUC" "$T/qs.out" && grep -q "^Bayes-optimal AUC" "$T/qs.out"; then pass pipeline_summary_prints_both_aucs; else fail pipeline_summary_prints_both_aucs "$(tail -c 600 "$T/qs.out")"; fi
check pipeline_auc_within_002_of_bayes $PYTHON -c '
import json, sys
e = json.load(open(sys.argv[1]))
gap = e["reference_auc"] - e["auc"]
print("test auc %.4f bayes %.4f gap %.4f" % (e["auc"], e["reference_auc"], gap))
sys.exit(0 if gap <= 0.02 and e["auc"] > 0.6 else 1)' "$OUT/eval.json"
check pipeline_report_self_contained $PYTHON -c '
import sys, re
h = open(sys.argv[1]).read()
need = ["Data quality", "Features", "Training", "Confusion matrix", "ROC", "Model card", "Lineage", "Timings per stage", "<svg"]
miss = [n for n in need if n not in h]
ext = re.findall(r"(?:src|href)=\"(?:https?:)?//", h) + re.findall(r"<script", h)
print("missing", miss, "external", ext)
sys.exit(1 if miss or ext else 0)' "$OUT/report.html"
check pipeline_report_shows_reference_profile $PYTHON -c '
import sys
h = open(sys.argv[1]).read()
ok = "Reference profile:" in h and h.count("class=\"ref\"") >= 10 and "item_price" in h
sys.exit(0 if ok else 1)' "$OUT/report.html"
for f in repo/ctr/1/model.onnx repo/ctr/1/features.json repo/ctr/1/features.db repo/ctr/1/meta.json pipeline-state.json; do
  [ -s "$OUT/$f" ] || { fail pipeline_outputs "$f missing"; break; }
done && pass pipeline_outputs

# ---- a copy of the example to edit; the same click log
EX="$T/ex"
cp -r "$KEEL_SRC/examples/clicks" "$EX"
rm -rf "$EX"/out-* "$EX/data"
P="$KEEL --tracking $T/runs pipeline run $EX/pipeline.yaml --out $T/o --set stages.ingest.source=$QS/clicks.csv --json"
$P > "$T/r1.json" 2> "$T/r1.err" || fail pipeline_first_run "$(tail -c 400 "$T/r1.err")"
want_states pipeline_first_run_all_ran "$T/r1.json" "ingest=ran validate=ran features=ran train=ran evaluate=ran export=ran register=ran"
$P > "$T/r2.json" 2> "$T/r2.err"
want_states pipeline_cached_all_skipped "$T/r2.json" "ingest=cached validate=cached features=cached train=cached evaluate=cached export=cached register=cached"
if grep -q "skipped" "$T/r2.err"; then pass pipeline_skip_says_so; else fail pipeline_skip_says_so "$(head -c 300 "$T/r2.err")"; fi
$P --only evaluate > "$T/r3.json" 2> "$T/r3.err"
want_states pipeline_only "$T/r3.json" "ingest=not run validate=not run features=not run train=not run evaluate=ran export=not run register=not run"
$P --from train > "$T/r4.json" 2> "$T/r4.err"
want_states pipeline_from "$T/r4.json" "ingest=not run validate=not run features=not run train=ran evaluate=ran export=ran register=ran"
$P --force > "$T/r5.json" 2> "$T/r5.err"
want_states pipeline_force "$T/r5.json" "ingest=ran validate=ran features=ran train=ran evaluate=ran export=ran register=ran"
expect_rc pipeline_bad_stage_name 2 $KEEL pipeline run "$EX/pipeline.yaml" --from trian --out "$T/o"
expect_rc pipeline_from_only_exclusive 2 $KEEL pipeline run "$EX/pipeline.yaml" --from train --only train --out "$T/o"

# a stage key that nothing reads (features.store was accepted and ignored; since
# issue 28 store names a shared redis:// store, so the unread key is another) is refused, named
sed 's/^    spec: features.yaml$/    spec: features.yaml\n    cache: online.db/' "$EX/pipeline.yaml" > "$EX/pipeline-store.yaml"
$KEEL pipeline run "$EX/pipeline-store.yaml" --out "$T/ostore" > /dev/null 2> "$T/store.err"
if grep -q "unknown key 'cache'" "$T/store.err" && grep -q "pipeline-store.yaml:14" "$T/store.err" && [ ! -e "$T/ostore/ingest" ]; then
  pass pipeline_ignored_stage_key_refused
else
  fail pipeline_ignored_stage_key_refused "$(head -c 300 "$T/store.err")"
fi

# ---- changing the feature spec re-runs features and everything after, nothing before
sed -i 's/max_size: 16/max_size: 12/' "$EX/features.yaml"
$P > "$T/r6.json" 2> "$T/r6.err"
want_states pipeline_feature_change_reruns_features_onward "$T/r6.json" "ingest=cached validate=cached features=ran train=ran evaluate=ran export=ran register=ran"

# ---- a failing stage stops there, keeps earlier outputs; the re-run resumes
cp "$EX/model.yaml" "$T/model.good"
sed -i 's/shape: \[12\]/shape: [13]/' "$EX/model.yaml"
$P > "$T/r7.json" 2> "$T/r7.err"; rc=$?
if [ $rc -eq 1 ] && grep -q '"failed_stage": "train"' "$T/r7.json" && grep -q "input.shape has 13" "$T/r7.json"; then pass pipeline_failure_stops_at_stage; else fail pipeline_failure_stops_at_stage "rc $rc $(head -c 400 "$T/r7.json")"; fi
if [ -s "$T/o/features/features.parquet" ] && grep -q '"features"' "$T/o/pipeline-state.json" && ! grep -q '"train":' "$T/o/pipeline-state.json"; then pass pipeline_failure_keeps_earlier_outputs; else fail pipeline_failure_keeps_earlier_outputs "$(head -c 300 "$T/o/pipeline-state.json")"; fi
cp "$T/model.good" "$EX/model.yaml"
$P > "$T/r8.json" 2> "$T/r8.err"
want_states pipeline_resume_after_failure "$T/r8.json" "ingest=cached validate=cached features=cached train=ran evaluate=ran export=ran register=ran"

# ---- lineage in the store: dataset version -> feature hash -> run -> model version -> alias
check pipeline_lineage_in_store $PYTHON -c '
import json, subprocess, sys
keel, runs, summ = sys.argv[1:4]
s = json.load(open(summ))
r = json.loads(subprocess.run([keel, "--tracking", runs, "runs", "show", str(s["run_id"]), "--json"], capture_output=True, text=True, check=True).stdout)
lin, tags = r["lineage"], r["tags"]
ok = lin["dataset_version"] == s["dataset_version"] and lin["feature_hash"] == s["feature_hash"] and tags["train_run"] == str(s["train_run_id"]) \
     and tags["model_version"] == "ctr/%d" % s["model_version"] and tags["alias"] == "ctr@champion"
tr = json.loads(subprocess.run([keel, "--tracking", runs, "runs", "show", str(s["train_run_id"]), "--json"], capture_output=True, text=True, check=True).stdout)
ok = ok and tr["lineage"]["feature_hash"] == s["feature_hash"] and tr["parent_id"] == s["run_id"] and "val_loss" in tr["metrics"]
m = json.loads(subprocess.run([keel, "--tracking", runs, "models", "show", "ctr", "--json"], capture_output=True, text=True, check=True).stdout)
m = m[0] if isinstance(m, list) else m
ok = ok and m["aliases"]["champion"] == s["model_version"]
print(lin, tags, m.get("aliases"))
sys.exit(0 if ok else 1)' "$KEEL" "$T/runs" "$T/r8.json"

# ---- keel eval on the Parquet test split; training-data errors name the column
$KEEL eval "$T/o/model" --json --roc > "$T/ev.json" 2> "$T/ev.err"
check pipeline_eval_parquet_split $PYTHON -c '
import json, sys
e = json.load(open(sys.argv[1]))
sys.exit(0 if e["split"] == "test" and 0.5 < e["auc"] <= 1 and len(e["confusion"]) == 2 and len(e["roc"]["fpr"]) > 2 else 1)' "$T/ev.json"
sed -e 's/label: clicked/label: clikced/' -e "s|dataset: .*|dataset: $T/o/features|" "$EX/model.yaml" > "$T/badlabel.yaml"
expect_rc train_parquet_missing_label 1 $KEEL train "$T/badlabel.yaml" --out "$T/m1" --quiet
if grep -q "label column 'clikced' not found" "$T/err"; then pass train_parquet_missing_label_message; else fail train_parquet_missing_label_message "$(head -c 300 "$T/err")"; fi
# (input.shape: the raw dataset's 2 numeric columns; the feature count is checked before any row is read)
sed -e "s|dataset: .*|dataset: $(dirname "$(ls "$T"/o/dataset/versions/*/part-00000.parquet | head -1)")\n  exclude: [ts]|" \
  -e 's/shape: \[12\]/shape: [2]/' "$EX/model.yaml" > "$T/nulls.yaml"
expect_rc train_parquet_null 1 $KEEL train "$T/nulls.yaml" --out "$T/m2" --quiet
if grep -q "feature column 'item_price' is null" "$T/err"; then pass train_parquet_null_message; else fail train_parquet_null_message "$(head -c 300 "$T/err")"; fi

# ---- a regression model (loss mse on the click label): the evaluate stage's note and the
# report give MAE, RMSE, R2 and the mean predictor's errors; an AUC gate is refused
EXR="$T/exr"
cp -r "$KEEL_SRC/examples/clicks" "$EXR"
rm -rf "$EXR"/out-* "$EXR/data"
sed -i 's/^loss: .*/loss: {type: mse}/' "$EXR/model.yaml"
sed -i '/max_gap_to_reference/d' "$EXR/pipeline.yaml"
PR="$KEEL --tracking $T/runs pipeline run $EXR/pipeline.yaml --out $T/oreg --set stages.ingest.source=$QS/clicks.csv --json"
if $PR > "$T/reg.json" 2> "$T/reg.err"; then pass pipeline_regression_runs; else fail pipeline_regression_runs "$(tail -c 400 "$T/reg.err")"; fi
check pipeline_regression_metrics_in_note_and_report $PYTHON -c '
import json, sys
j = json.load(open(sys.argv[1]))["stages"]["evaluate"]
e = json.load(open(sys.argv[2]))
h = open(sys.argv[3]).read()
print(j.get("note"), e.get("rmse"), e.get("baseline"))
ok = "RMSE" in j["note"] and "mean predictor" in j["note"] and 0 < e["rmse"] <= e["baseline"]["rmse"] * 1.05
ok = ok and "Regression errors" in h and "mean predictor" in h and "R&sup2;" in h
sys.exit(0 if ok else 1)' "$T/reg.json" "$T/oreg/eval.json" "$T/oreg/report.html"
$KEEL --tracking $T/runs pipeline run "$EXR/pipeline.yaml" --out "$T/oreg" --set stages.ingest.source=$QS/clicks.csv --set stages.evaluate.min_auc=0.6 > /dev/null 2> "$T/reg2.err"
if grep -q "regression" "$T/reg2.err" && grep -q "min_auc" "$T/reg2.err"; then pass pipeline_regression_auc_gate_refused; else fail pipeline_regression_auc_gate_refused "$(tail -c 300 "$T/reg2.err")"; fi

# ---- the optional serve stage (in-process keel serve on the exported repo):
# ready, answers a raw record through the features pipeline, survives SIGHUP,
# drains and exits 0 on SIGTERM
$P --set stages.serve.port=0 --only serve > "$T/sv.json" 2> "$T/sv.err" &
SV=$!
URL=""
for _ in $(seq 1 300); do
  URL=$(grep -o 'listening on http://[0-9.:]*' "$T/sv.err" | head -1 | sed 's/listening on //')
  [ -n "$URL" ] && break
  kill -0 $SV 2>/dev/null || break
  sleep 0.1
done
if [ -n "$URL" ] && curl -sf "$URL/v2/health/ready" > /dev/null; then pass pipeline_serve_stage_ready; else fail pipeline_serve_stage_ready "$(tail -c 400 "$T/sv.err")"; fi
REC='{"instances": [{"user_id": 42, "item_price": 19.99, "ts": "2023-11-03T20:15:00Z", "category": "beauty"}]}'
curl -s "$URL/v1/models/ctr:predict" -H 'Content-Type: application/json' -d "$REC" > "$T/sv.pred"
check pipeline_serve_stage_predicts $PYTHON -c '
import json, sys
a = json.load(open(sys.argv[1])); fh = json.load(open(sys.argv[2]))["feature_hash"]
print(a)
sys.exit(0 if len(a["predictions"]) == 1 and a.get("feature_hash") == fh else 1)' "$T/sv.pred" "$T/o/features/features.json"
kill -HUP $SV 2>/dev/null; sleep 0.3
if kill -0 $SV 2>/dev/null && curl -sf "$URL/v2/health/live" > /dev/null; then pass pipeline_serve_stage_survives_sighup; else fail pipeline_serve_stage_survives_sighup "$(tail -c 400 "$T/sv.err")"; fi
kill -TERM $SV 2>/dev/null
rc=0; wait $SV || rc=$?
if [ $rc -eq 0 ] && grep -q "stopped after draining" "$T/sv.err" && grep -q '"serve": {"state": "ran"' "$T/sv.json"; then pass pipeline_serve_stage_sigterm_exits_0; else fail pipeline_serve_stage_sigterm_exits_0 "rc $rc $(tail -c 300 "$T/sv.err") $(head -c 300 "$T/sv.json")"; fi
