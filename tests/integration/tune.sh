# keel tune end to end on the digits MLP (a few epochs per trial): a study
# runs trials in parallel processes, continues when re-run, reuses cached
# configurations, records crashing trials and goes on, reports a metric that
# never appears, and `keel tune show` reports the study with its pictures.
. "$KEEL_SRC/tests/integration/lib.sh"
export KEEL_TRACKING="${KEEL_TEST_TRACKING:-$T/runs}" # track_pg.sh: a PostgreSQL URL
cd "$T"
$PYTHON "$KEEL_SRC/examples/digits/prepare.py" "$T/data" > /dev/null || { fail tune_prepare_data "prepare.py failed"; exit 0; }
cat > spec.yaml <<'Y'
seed: 1
input: {shape: [64]}
layers:
  - {type: linear, out: 64}
  - {type: relu}
  - {type: dropout, p: 0.1}
  - {type: linear, out: 10}
loss: {type: cross_entropy}
optimizer: {type: adamw, lr: 0.003, weight_decay: 0.01}
train: {epochs: 3, batch_size: 64, val_fraction: 0.2}
data: {x: data/x_train.npy, y: data/y_train.npy}
Y
cat > space.yaml <<'Y'
optimizer.lr: {type: float, low: 0.0003, high: 0.03, log: true}
layers.0.out: {type: int, low: 16, high: 128, step: 16}
layers.2.p: {type: float, low: 0, high: 0.5}
Y
expect_rc tune_runs_study 0 "$KEEL" tune spec.yaml --space space.yaml --trials 4 --parallel 2 --study s1 --json
$PYTHON - "$T/out" <<'P' && pass tune_json_summary || fail tune_json_summary "$(cat "$T/out" "$T/err" | head -c 600)"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["trials"] == 4 and d["complete"] == 4 and d["launched"] == 4, d
assert 0.5 < d["best"]["value"] <= 1 and set(d["best"]["params"]) == {"optimizer.lr", "layers.0.out", "layers.2.p"}, d
P
expect_rc tune_resumes_study 0 "$KEEL" tune spec.yaml --space space.yaml --trials 6 --study s1 --json
$PYTHON -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["trials"]==6 and d["launched"]==2, d' "$T/out" \
  && pass tune_resume_continues || fail tune_resume_continues "$(cat "$T/out")"
# grid over 2 points: the third trial finds the grid exhausted; re-running trains nothing
printf 'layers.0.out: {type: int, low: 16, high: 32, step: 16}\n' > grid.yaml
expect_rc tune_grid 0 "$KEEL" tune spec.yaml --space grid.yaml --sampler grid --trials 3 --study g --json
$PYTHON -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["trials"]==2 and d["complete"]==2, d' "$T/out" \
  && pass tune_grid_exhausts || fail tune_grid_exhausts "$(cat "$T/out")"
# random sampler over one choice: every trial after the first is the same configuration -> cached
printf 'layers.0.out: {type: categorical, choices: ["32"]}\n' > one.yaml
expect_rc tune_cache 0 "$KEEL" tune spec.yaml --space one.yaml --sampler random --trials 3 --study c --json
grep -c "cached" "$T/err" | grep -q '^2$' && $PYTHON -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["launched"]==1 and d["complete"]==3, d' "$T/out" \
  && pass tune_cached_configuration_not_retrained || fail tune_cached_configuration_not_retrained "$(cat "$T/err" "$T/out" | head -c 600)"
# a trial that crashes (a spec key that does not exist) is recorded as failed; the study goes on
printf 'layers.9.out: {type: int, low: 16, high: 32}\n' > bad.yaml
expect_rc tune_failing_trials 1 "$KEEL" tune spec.yaml --space bad.yaml --trials 2 --study bad
[ "$(grep -c 'failed' "$T/err")" -ge 2 ] && grep -q "layers.9" "$T/err" && pass tune_failed_trial_recorded_and_study_goes_on \
  || fail tune_failed_trial_recorded_and_study_goes_on "$(head -c 600 "$T/err")"
expect_rc tune_missing_metric 1 "$KEEL" tune spec.yaml --space space.yaml --trials 3 --study m --metric val_f1
grep -q "metric 'val_f1' never appeared" "$T/err" && [ "$(grep -c started "$T/err")" -eq 1 ] \
  && pass tune_missing_metric_message || fail tune_missing_metric_message "$(head -c 600 "$T/err")"
expect_rc tune_contradictory_rerun 1 "$KEEL" tune spec.yaml --space grid.yaml --trials 6 --study s1
grep -q "another search space" "$T/err" && pass tune_contradictory_rerun_message || fail tune_contradictory_rerun_message "$(cat "$T/err")"
printf '{}\n' > empty.yaml
expect_rc tune_empty_space 1 "$KEEL" tune spec.yaml --space empty.yaml && grep -q "empty" "$T/err" \
  && pass tune_empty_space_message || fail tune_empty_space_message "$(cat "$T/err")"
printf 'x: {type: float, low: 1, high: 0}\n' > contra.yaml
expect_rc tune_contradictory_space 1 "$KEEL" tune spec.yaml --space contra.yaml && grep -q "contra.yaml:1:" "$T/err" \
  && pass tune_contradictory_space_message || fail tune_contradictory_space_message "$(cat "$T/err")"
expect_rc tune_show 0 "$KEEL" tune show s1 --json --out "$T/pics"
$PYTHON - "$T/out" "$T/pics" <<'P' && pass tune_show_report || fail tune_show_report "$(head -c 600 "$T/out")"
import json, os, sys
d = json.load(open(sys.argv[1]))
assert len(d["trials"]) == 6 and d["best"]["value"] > 0.5, d
assert abs(sum(d["importance"].values()) - 1) < 1e-6 or sum(d["importance"].values()) == 0, d["importance"]
for f in ("history.svg", "parallel.svg"):
    svg = open(os.path.join(sys.argv[2], f)).read()
    assert svg.startswith("<svg") and ("<path" in svg or "<polyline" in svg), f
P
expect_rc tune_show_unknown 1 "$KEEL" tune show nosuch && grep -q "no study named 'nosuch'" "$T/err" \
  && pass tune_show_unknown_message || fail tune_show_unknown_message "$(cat "$T/err")"
# the default metric follows the loss: val_loss (minimised) for a regression, said on stderr
$PYTHON -c 'import numpy as np; x=np.load("data/x_train.npy"); np.save("data/yr.npy", (x[:, :1] * 2).astype(np.float32))'
sed -e 's/cross_entropy/mse/' -e 's/out: 10}/out: 1}/' -e 's#y: data/y_train.npy#y: data/yr.npy#' spec.yaml > reg.yaml
expect_rc tune_regression_runs 0 "$KEEL" tune reg.yaml --space space.yaml --trials 2 --study r1 --json
if grep -q "metric: val_loss (the default for a mse loss" "$T/err" && \
   $PYTHON -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["metric"]=="val_loss" and d["direction"]=="minimize", d' "$T/out"; then
  pass tune_regression_default_metric
else fail tune_regression_default_metric "$(head -c 400 "$T/err") $(head -c 300 "$T/out")"; fi
# the same study with another metric: the error says how to continue or start anew
expect_rc tune_other_metric_refused 1 "$KEEL" tune reg.yaml --space space.yaml --trials 3 --study r1 --metric train_loss
grep -q -- "--metric val_loss --direction minimize" "$T/err" && pass tune_other_metric_explains \
  || fail tune_other_metric_explains "$(head -c 400 "$T/err")"
