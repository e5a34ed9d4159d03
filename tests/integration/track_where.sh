# Where the experiment store lives (issue 23 §5), end to end: the same store
# from every folder (--tracking > KEEL_TRACKING > the nearest keel-runs/ >
# the per-user default), read-only commands never create one and every "not
# found" names the store and the rule; keel train logs whenever a store is
# found (--no-track), with the resolved spec in full as params and the run id
# in meta.json, which models register links; keel tune --set and tune
# register; models register --features/--store for window features.
. "$KEEL_SRC/tests/integration/lib.sh"
K=$KEEL
unset KEEL_TRACKING
export XDG_DATA_HOME="$T/xdg"           # the per-user default of this test
export KEEL_TRACKING_CEILING="$T"         # never look above this test's folder
USER_STORE="$XDG_DATA_HOME/keel/runs"
mkdir -p "$T/proj/a/b" "$T/elsewhere"
jq_() { $PYTHON -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

# ---- nothing found: the per-user default; read-only commands create nothing
cd "$T/elsewhere"
expect_rc where_user_default 0 $K runs where --json &&
  [ "$(jq_ "$T/out" "d['rule'], d['dir'], d['exists']")" = "('user', '$USER_STORE', False)" ] &&
  pass where_user_default_dir || fail where_user_default_dir "$(cat "$T/out")"
expect_rc where_list_no_store 0 $K runs list --json &&
  { [ "$(cat "$T/out")" = "[]" ] && grep -q "no experiment store at $USER_STORE (the per-user default" "$T/err" &&
    pass where_list_no_store_says_so || fail where_list_no_store_says_so "$(cat "$T/out" "$T/err")"; }
expect_rc where_models_list_no_store 0 $K models list --json
expect_rc where_show_no_store 1 $K runs show 1 &&
  { grep -q "no experiment store at $USER_STORE (the per-user default \$XDG_DATA_HOME/keel/runs: no keel-runs/ folder in $T/elsewhere or above)" "$T/err" &&
    pass where_show_names_store_and_rule || fail where_show_names_store_and_rule "$(cat "$T/err")"; }
expect_rc where_models_show_no_store 1 $K models show ghost
expect_rc where_tune_show_no_store 1 $K tune show ghost
expect_rc where_serve_ref_no_store 1 timeout 20 $K serve ghost@champion --port 0
expect_rc where_ui_no_store 1 timeout 20 $K ui --port 0
[ ! -e "$XDG_DATA_HOME" ] && pass where_readonly_created_nothing || fail where_readonly_created_nothing "$(find "$XDG_DATA_HOME")"

# ---- a tiny training set and spec
$PYTHON - <<'PY' || { fail where_data "numpy needed"; exit 0; }
import numpy as np
r = np.random.default_rng(0)
x = r.standard_normal((300, 8)).astype(np.float32)
np.save("x.npy", x)
np.save("y.npy", (x[:, 0] > 0).astype(np.int64))
PY
cat > spec.yaml <<EOF
seed: 1
input: {shape: [8]}
layers:
  - {type: linear, out: 12}
  - {type: relu}
  - {type: linear, out: 2}
optimizer: {type: sgd, lr: 0.1}
train: {epochs: 2, batch_size: 32}
data: {x: $T/elsewhere/x.npy, y: $T/elsewhere/y.npy}
EOF
# no store found (the per-user default does not exist yet): not logged, nothing created
expect_rc where_train_untracked 0 $K train spec.yaml --out m0 --quiet &&
  { ! grep -q "logged run" "$T/out" && [ ! -e "$XDG_DATA_HOME" ] && ! grep -q run_id m0/meta.json &&
    pass where_train_no_store_not_logged || fail where_train_no_store_not_logged "$(cat "$T/out")"; }

# ---- a keel-runs/ folder: found from the folder and every folder below it
mkdir "$T/proj/keel-runs"
cd "$T/proj/a/b"
expect_rc where_nearest 0 $K runs where --json &&
  [ "$(jq_ "$T/out" "d['rule'], d['dir']")" = "('nearest', '$T/proj/keel-runs')" ] &&
  pass where_nearest_from_below || fail where_nearest_from_below "$(cat "$T/out")"
expect_rc where_empty_folder_show 1 $K runs show 1 &&
  { grep -q "no experiment store at $T/proj/keel-runs (the nearest keel-runs/ folder from $T/proj/a/b)" "$T/err" &&
    pass where_empty_folder_named || fail where_empty_folder_named "$(cat "$T/err")"; }
[ ! -e "$T/proj/keel-runs/keel.db" ] && pass where_empty_folder_not_created || fail where_empty_folder_not_created "keel.db created by a reader"
expect_rc where_train_tracked 0 $K train "$T/elsewhere/spec.yaml" --out m --quiet &&
  { grep -q "logged run 1 to $T/proj/keel-runs" "$T/out" && pass where_train_logs_when_found || fail where_train_logs_when_found "$(cat "$T/out")"; }
expect_rc where_train_no_track 0 $K train "$T/elsewhere/spec.yaml" --out m2 --quiet --no-track &&
  { ! grep -q "logged run" "$T/out" && pass where_train_no_track_not_logged || fail where_train_no_track_not_logged "$(cat "$T/out")"; }
cd "$T/proj/a"
expect_rc where_same_store_from_parent 0 $K runs list --json &&
  { [ "$(jq_ "$T/out" "len(d)")" = "1" ] && pass where_same_store_every_folder || fail where_same_store_every_folder "$(cat "$T/out")"; }
# params: the resolved spec in full (layer sizes, defaults), not a summary
expect_rc where_params 0 $K runs show 1 --json &&
  $PYTHON - "$T/out" <<'PY' && pass where_params_full_spec || fail where_params_full_spec "$(head -c 600 "$T/out")"
import json, sys
p = json.load(open(sys.argv[1]))["params"]
want = {"layers.0.type": "linear", "layers.0.in": "8", "layers.0.out": "12", "layers.0.shape": "[12]", "layers.1.type": "relu",
        "layers.2.in": "12", "layers.2.out": "2", "optimizer.type": "sgd", "optimizer.lr": "0.1", "optimizer.momentum": "0",
        "train.epochs": "2", "train.batch_size": "32", "train.val_fraction": "0.1", "input.shape": "[8]", "loss.type": "cross_entropy",
        "model.parameters": str(8 * 12 + 12 + 12 * 2 + 2), "lr": "0.1"}
bad = {k: (p.get(k), v) for k, v in want.items() if p.get(k) != v}
assert not bad, bad
PY
# the run id travels in meta.json; models register links the version to it
cd "$T/proj/a/b"
[ "$(jq_ "$T/proj/a/b/m/meta.json" "d['run_id']")" = "1" ] && pass where_meta_run_id || fail where_meta_run_id "$(grep run_id m/meta.json)"
expect_rc where_register 0 $K models register m --name clf &&
  { grep -q "registered clf version 1 (from run 1)" "$T/out" && pass where_register_says_run || fail where_register_says_run "$(cat "$T/out")"; }
expect_rc where_models_show 0 $K models show clf/1 --json &&
  { [ "$(jq_ "$T/out" "d['versions'][0]['run_id']")" = "1" ] && pass where_register_links_run || fail where_register_links_run "$(cat "$T/out")"; }
expect_rc where_models_show_text 0 $K models show clf &&
  { grep -Eq "^  run +1$" "$T/out" && pass where_models_show_prints_run || fail where_models_show_prints_run "$(cat "$T/out")"; }
# a model trained against another store: registered without a false link
expect_rc where_train_other_store 0 $K --tracking "$T/other" train "$T/elsewhere/spec.yaml" --out m3 --quiet
$K --tracking "$T/other" runs simulate --steps 1 > /dev/null 2>&1   # run 2 exists there only
$PYTHON -c "import json; d=json.load(open('m3/meta.json')); d['run_id']=2; json.dump(d, open('m3/meta.json','w'))"
expect_rc where_register_foreign_run 0 $K models register m3 --name clf --json &&
  { [ "$(jq_ "$T/out" "d['run_id']")" = "None" ] && pass where_register_foreign_run_not_linked || fail where_register_foreign_run_not_linked "$(cat "$T/out")"; }
expect_rc where_register_bad_run 1 $K models register m3 --name clf --run 99 &&
  { grep -q "run 99 (the model's producing run) not found in the experiment store $T/proj/keel-runs" "$T/err" &&
    pass where_register_bad_run_named || fail where_register_bad_run_named "$(cat "$T/err")"; }
# KEEL_TRACKING beats the folder; --tracking beats both
expect_rc where_env 0 env KEEL_TRACKING="$T/envstore" $K runs where --json &&
  [ "$(jq_ "$T/out" "d['rule'], d['dir']")" = "('env', '$T/envstore')" ] && pass where_env_wins || fail where_env_wins "$(cat "$T/out")"
expect_rc where_flag 0 env KEEL_TRACKING="$T/envstore" $K --tracking "$T/flagstore" runs where --json &&
  [ "$(jq_ "$T/out" "d['rule'], d['dir']")" = "('flag', '$T/flagstore')" ] && pass where_flag_wins || fail where_flag_wins "$(cat "$T/out")"
expect_rc where_env_model_missing 1 env KEEL_TRACKING="$T/other" $K models show nope &&
  { grep -q "model 'nope' not found in the experiment store $T/other (KEEL_TRACKING)" "$T/err" &&
    pass where_not_found_names_env || fail where_not_found_names_env "$(cat "$T/err")"; }

# ---- keel tune: --set in every trial; register the best trial's model
printf 'optimizer.lr: {type: categorical, choices: [0.05, 0.2]}\n' > space.yaml
expect_rc where_tune_set 0 $K tune "$T/elsewhere/spec.yaml" --space space.yaml --trials 2 --sampler grid --set train.epochs=1 --set layers.0.out=6 --study s1 --json
[ -f tune-s1/trial-0/meta.json ] && $PYTHON - tune-s1/trial-0/meta.json <<'PY' && pass where_tune_set_applied || fail where_tune_set_applied "$(head -c 300 tune-s1/trial-0/meta.json)"
import json, sys
d = json.load(open(sys.argv[1]))
spec = json.loads(d["spec"])
assert spec["train"]["epochs"] == 1 and spec["layers"][0]["out"] == 6, spec
assert d["epochs"] == 1, d["epochs"]
PY
expect_rc where_tune_set_space_key 1 $K tune "$T/elsewhere/spec.yaml" --space space.yaml --trials 2 --set optimizer.lr=0.1 --study s1
grep -q "optimizer.lr is a parameter of the search space" "$T/err" && pass where_tune_set_space_key_named || fail where_tune_set_space_key_named "$(cat "$T/err")"
expect_rc where_tune_set_rerun_differs 1 $K tune "$T/elsewhere/spec.yaml" --space space.yaml --trials 3 --sampler grid --set train.epochs=2 --study s1
grep -q "other --set overrides (train.epochs=1, layers.0.out=6; now train.epochs=2)" "$T/err" && pass where_tune_set_recorded || fail where_tune_set_recorded "$(cat "$T/err")"
expect_rc where_tune_show_sets 0 $K tune show s1 --json --out "$T/pics" &&
  { [ "$(jq_ "$T/out" "d['sets']")" = "['train.epochs=1', 'layers.0.out=6']" ] && pass where_tune_show_lists_sets ||
    fail where_tune_show_lists_sets "$(head -c 300 "$T/out")"; }
expect_rc where_tune_register 0 $K tune register s1 --name tuned --alias champion --json &&
  $PYTHON - "$T/out" <<'PY' && pass where_tune_register_best || fail where_tune_register_best "$(cat "$T/out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["name"] == "tuned" and d["version"] == 1 and d["study"] == "s1" and d["run_id"] > 0, d
assert d["dir"].endswith("tune-s1/trial-%d" % d["trial"]), d
PY
rid=$(jq_ "$T/out" "d['run_id']")
expect_rc where_tune_register_show 0 $K models show tuned@champion --json &&
  { [ "$(jq_ "$T/out" "d['versions'][0]['run_id'], d['versions'][0]['tags']['study']")" = "($rid, 's1')" ] &&
    pass where_tune_register_linked || fail where_tune_register_linked "$(cat "$T/out")"; }
expect_rc where_tune_register_unknown 1 $K tune register nosuch --name x &&
  { grep -q "no study named 'nosuch' in the experiment store $T/proj/keel-runs (the nearest keel-runs/ folder from $T/proj/a/b)" "$T/err" &&
    pass where_tune_register_unknown_named || fail where_tune_register_unknown_named "$(cat "$T/err")"; }

# ---- window features in a hand-registered model
cd "$T/elsewhere"
$K data gen-clicks clicks.csv --rows 3000 --seed 3 > /dev/null 2>&1
cat > clicks.yaml <<'EOF'
name: clicks
columns:
  - {name: user_id, type: int64, nullable: false, min: 1}
  - {name: item_price, type: float64, min: 0, max_null_ratio: 0.05}
  - {name: ts, type: timestamp, timezone: UTC, nullable: false}
  - {name: category, type: category, nullable: false, values: [books, toys, home, sports, garden, beauty]}
  - {name: clicked, type: bool, nullable: false}
EOF
cat > fspec.yaml <<'EOF'
label: {column: clicked, type: bool}
features:
  - {name: price_z, transform: standardize, input: item_price, type: float64, fill: 0}
  - {name: user_count, transform: window, agg: count, events: 50, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}}
EOF
if $K ingest clicks.csv --schema clicks.yaml --out ds > /dev/null 2>&1 && $K features fit fspec.yaml --data ds --out f.json > /dev/null 2>&1 &&
   $K features materialize f.json --data ds --store f.db > /dev/null 2>&1; then
  mkdir -p wm && cp "$T/proj/a/b/m/model.onnx" wm/ && cp f.json wm/features.json
  export KEEL_TRACKING="$T/wstore"
  expect_rc where_window_no_store 1 $K models register wm --name win &&
    { grep -q "feature user_count is a window" "$T/err" && grep -q "keel features materialize" "$T/err" &&
      grep -q "keel models register wm --name win --features .* --store STORE.db" "$T/err" &&
      pass where_window_no_store_names_fix || fail where_window_no_store_names_fix "$(cat "$T/err")"; }
  rm wm/features.json
  expect_rc where_window_features_only 1 $K models register wm --name win --features f.json
  expect_rc where_window_bundle 0 $K models register wm --name win --features f.json --store f.db
  expect_rc where_window_resolve 0 $K models resolve win/1 "$T/resolved" &&
    { cmp -s "$T/resolved/features.json" f.json && cmp -s "$T/resolved/features.db" f.db && [ -f "$T/resolved/model.onnx" ] &&
      pass where_window_bundled_files || fail where_window_bundled_files "$(ls "$T/resolved")"; }
  expect_rc where_window_store_missing 1 $K models register wm --name win --features f.json --store nosuch.db
  echo '{"user_id": 5, "item_price": 3.5, "ts": "2023-11-02T12:05:00Z", "category": "toys"}' > rec.jsonl
  expect_rc where_window_transform_no_store 1 $K features transform f.json < rec.jsonl &&
    { grep -q "keel models register DIR --features features.json --store STORE.db" "$T/err" &&
      pass where_window_online_error_names_fix || fail where_window_online_error_names_fix "$(cat "$T/err")"; }
  unset KEEL_TRACKING
else
  fail where_window_setup "ingest/fit/materialize failed"
fi
exit 0
