#!/usr/bin/env bash
# keel train / keel eval end to end on scikit-learn digits: learning (MLP),
# artifacts, determinism across runs and thread counts, resume after kill -9,
# memory plan and limit, bad specs and bad data, ONNX validity.
. "$KEEL_SRC/tests/integration/lib.sh"
D=$T/data
if ! $PYTHON "$KEEL_SRC/examples/digits/prepare.py" "$D" > "$T/prep.log" 2>&1; then
  fail train_digits_data "prepare.py failed (python3-sklearn, python3-numpy needed): $(tail -c 300 "$T/prep.log")"; exit 0
fi
cp "$KEEL_SRC/examples/digits/mlp.yaml" "$T/mlp.yaml"
sed -i "s#data/#$D/#g" "$T/mlp.yaml"

# ---- learning: MLP >= 97 % on the held-out test split
if expect_rc train_mlp_runs 0 $KEEL train "$T/mlp.yaml" --out "$T/mlp" --quiet; then
  $KEEL eval "$T/mlp" --data "$D/x_test.npy,$D/y_test.npy" --json > "$T/ev.json" 2>"$T/ev.err"
  acc=$($PYTHON -c "import json;print(json.load(open('$T/ev.json'))['accuracy'])" 2>/dev/null)
  if $PYTHON -c "import sys; sys.exit(0 if float('${acc:-0}') >= 0.97 else 1)"; then pass train_mlp_digits_97; else fail train_mlp_digits_97 "test accuracy ${acc:-?} < 0.97"; fi
  $KEEL eval "$T/mlp" --data "$D/x_test.npy,$D/y_test.npy" > "$T/ev.txt"
  if grep -q "confusion matrix" "$T/ev.txt" && grep -q "accuracy" "$T/ev.txt"; then pass train_eval_text; else fail train_eval_text "$(head -c 300 "$T/ev.txt")"; fi
  ok=1
  for f in model.onnx model.safetensors meta.json card.md metrics.csv curves.svg spec.yaml; do [ -s "$T/mlp/$f" ] || { ok=0; fail train_artifacts "missing $f"; }; done
  [ $ok = 1 ] && pass train_artifacts
  if $PYTHON - "$T/mlp" > "$T/meta.out" 2>&1 <<'PY'
import hashlib, json, sys, os
d = sys.argv[1]
m = json.load(open(os.path.join(d, "meta.json")))
for f, h in m["files"].items():  # the one manifest shape: name -> {sha256, bytes}
    data = open(os.path.join(d, f), "rb").read()
    assert hashlib.sha256(data).hexdigest() == h["sha256"] and len(data) == h["bytes"], f
for k in ["seed", "spec", "code_version", "data", "final_metrics", "best"]:
    assert k in m, k
assert m["data"]["x_sha256"] and "val_accuracy" in m["final_metrics"]
svg = open(os.path.join(d, "curves.svg")).read()
# the shared chart (track's kl_svg_chart): train loss, validation loss and accuracy (right axis)
assert svg.count('<path class="series"') >= 3 and "validation accuracy" in svg and 'class="yaxis-right"' in svg
assert open(os.path.join(d, "metrics.csv")).readline().startswith("step,epoch,split,loss")
card = open(os.path.join(d, "card.md")).read()
for s in ["Model details", "Intended use", "Training data", "Training procedure", "Evaluation results", "Limitations"]:
    assert s in card, s
PY
  then pass train_meta_card_curves; else fail train_meta_card_curves "$(tail -c 400 "$T/meta.out")"; fi
  if $PYTHON -c "import onnx; m=onnx.load('$T/mlp/model.onnx'); onnx.checker.check_model(m, full_check=True); assert m.opset_import[0].version == 17" 2> "$T/onnx.err"; then
    pass train_onnx_valid; else fail train_onnx_valid "$(tail -c 300 "$T/onnx.err")"; fi
fi

# ---- determinism: two runs, and 1 vs 2 threads, give identical weights and losses
cat > "$T/det.yaml" <<EOF
seed: 3
input: {shape: [1, 8, 8]}
layers:
  - {type: conv2d, out: 8, kernel: 3, padding: 1}
  - {type: batchnorm2d}
  - {type: relu}
  - {type: maxpool2d, kernel: 2}
  - {type: flatten}
  - {type: dropout, p: 0.2}
  - {type: linear, out: 32}
  - {type: gelu}
  - {type: linear, out: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 0.0001}
schedule: {type: cosine, warmup_steps: 10}
train: {epochs: 3, batch_size: 32, val_fraction: 0, checkpoint_every: 50, grad_clip: 1.0}
data: {x: $D/x_train_img.npy, y: $D/y_train.npy}
EOF
$KEEL train "$T/det.yaml" --out "$T/d1" --quiet --max-steps 100 --threads 1 > /dev/null 2>&1
$KEEL train "$T/det.yaml" --out "$T/d2" --quiet --max-steps 100 --threads 2 > /dev/null 2>&1
$KEEL train "$T/det.yaml" --out "$T/d3" --quiet --max-steps 100 --threads 2 > /dev/null 2>&1
h1=$(sha256sum < "$T/d1/model.safetensors"); h2=$(sha256sum < "$T/d2/model.safetensors"); h3=$(sha256sum < "$T/d3/model.safetensors")
if [ -s "$T/d1/model.safetensors" ] && [ "$h1" = "$h2" ] && [ "$h2" = "$h3" ] && cmp -s "$T/d1/metrics.csv" "$T/d2/metrics.csv"; then
  pass train_deterministic_runs_and_threads; else fail train_deterministic_runs_and_threads "weights or losses differ between runs / thread counts"; fi

# ---- resume: 100 straight vs crash (SIGKILL) after step 60 + resume from the step-50 checkpoint
KEEL_TRAIN_CRASH_AT_STEP=60 $KEEL_HOOKS train "$T/det.yaml" --out "$T/r" --quiet --max-steps 100 > /dev/null 2>&1
rc=$?
if [ $rc -ne 137 ]; then fail train_resume_after_kill "the run was not killed (exit $rc)"; else
  [ -f "$T/r/model.safetensors" ] && fail train_resume_after_kill "artifacts written before the kill?"
  $KEEL train "$T/det.yaml" --out "$T/r" --quiet --max-steps 100 --resume > /dev/null 2> "$T/r.err"
  hr=$(sha256sum < "$T/r/model.safetensors" 2>/dev/null)
  if [ "$hr" = "$h1" ] && cmp -s "$T/d1/metrics.csv" "$T/r/metrics.csv"; then pass train_resume_after_kill;
  else fail train_resume_after_kill "resumed weights differ from the straight run: $(tail -c 300 "$T/r.err")"; fi
fi
expect_rc train_resume_without_checkpoint 1 $KEEL train "$T/det.yaml" --out "$T/none" --resume --quiet

# ---- memory plan
if $KEEL train "$T/det.yaml" --out "$T/m" --quiet --max-steps 1 --memory-report > "$T/mem.txt" 2>&1 &&
   grep -q params "$T/mem.txt" && grep -q activations "$T/mem.txt" && grep -q peak "$T/mem.txt" && grep -q optimizer "$T/mem.txt" && grep -q "training step: one planned graph" "$T/mem.txt"; then
  pass train_memory_report; else fail train_memory_report "$(head -c 300 "$T/mem.txt")"; fi
expect_rc train_memory_limit 1 $KEEL train "$T/det.yaml" --out "$T/m2" --quiet --memory-limit 200K
if grep -q "exceeds --memory-limit" "$T/err" && grep -q "largest part" "$T/err" && [ ! -e "$T/m2/model.onnx" ]; then pass train_memory_limit_message;
else fail train_memory_limit_message "$(head -c 300 "$T/err")"; fi

# ---- bad specs and bad data
printf 'input: {shape: [64]}\nlayers:\n  - {type: linear, out: 10, bais: 1}\n' > "$T/bad1.yaml"
expect_rc train_bad_key 1 $KEEL train "$T/bad1.yaml" --out "$T/b"
grep -q "bad1.yaml:3" "$T/err" && grep -q "bias" "$T/err" && pass train_bad_key_message || fail train_bad_key_message "$(head -c 300 "$T/err")"
printf 'input: {shape: [64]}\nlayers:\n  - {type: linear, out: 10}\n  - {type: conv2d, out: 4, kernel: 3, name: oops}\n' > "$T/bad2.yaml"
expect_rc train_bad_shape 1 $KEEL train "$T/bad2.yaml" --out "$T/b"
grep -q "layer oops (conv2d)" "$T/err" && grep -q "bad2.yaml:4" "$T/err" && pass train_bad_shape_message || fail train_bad_shape_message "$(head -c 300 "$T/err")"
$PYTHON -c "
import numpy as np
x = np.load('$D/x_train.npy'); y = np.load('$D/y_train.npy')
y2 = y.copy(); y2[17] = 12; np.save('$T/y_bad.npy', y2)
x2 = x.copy(); x2[5, 3] = np.nan; np.save('$T/x_nan.npy', x2)"
sed "s#$D/y_train.npy#$T/y_bad.npy#" "$T/mlp.yaml" > "$T/bad3.yaml"
expect_rc train_label_range 1 $KEEL train "$T/bad3.yaml" --out "$T/b"
grep -q "row 17: label 12 outside the class range" "$T/err" && pass train_label_range_message || fail train_label_range_message "$(head -c 300 "$T/err")"
sed "s#$D/x_train.npy#$T/x_nan.npy#" "$T/mlp.yaml" > "$T/bad4.yaml"
expect_rc train_nan_data 1 $KEEL train "$T/bad4.yaml" --out "$T/b"
grep -q "row 5, value 3 is NaN" "$T/err" && pass train_nan_data_message || fail train_nan_data_message "$(head -c 300 "$T/err")"
[ ! -e "$T/b/model.onnx" ] && pass train_bad_input_no_artifacts || fail train_bad_input_no_artifacts "artifacts written"

# ---- mixed precision: fp16 activations/gradients with dynamic loss scaling
sed 's/  grad_clip: 5.0/  grad_clip: 5.0\n  precision: fp16\n  loss_scale: {init: 1.0e12}/' "$T/mlp.yaml" > "$T/fp16.yaml"
if $KEEL train "$T/fp16.yaml" --out "$T/fp16" --quiet > "$T/fp16.out" 2>&1 && grep -q "steps skipped for inf/NaN" "$T/fp16.out"; then
  acc=$($KEEL eval "$T/fp16" --data "$D/x_test.npy,$D/y_test.npy" --json | sed -E 's/.*"accuracy":([0-9.]+).*/\1/')
  skipped=$(sed -nE 's/.*, ([0-9]+) steps skipped.*/\1/p' "$T/fp16.out")
  if awk -v a="${acc:-0}" -v s="${skipped:-0}" 'BEGIN{exit !(a >= 0.95 && s >= 20 && s <= 30)}'; then pass train_fp16_loss_scaling;
  else fail train_fp16_loss_scaling "accuracy ${acc:-?}, skipped ${skipped:-?} (expected ~23 back-offs from 1e12)"; fi
else fail train_fp16_loss_scaling "$(tail -c 300 "$T/fp16.out")"; fi
sed 's/  grad_clip: 5.0/  grad_clip: 5.0\n  precision: fp16\n  loss_scale: {init: 1.0e12, min: 1.0e9}/' "$T/mlp.yaml" > "$T/fp16c.yaml"
expect_rc train_fp16_scale_collapse 1 $KEEL train "$T/fp16c.yaml" --out "$T/fp16c" --quiet
grep -q "loss scale collapsed to .* below the floor" "$T/err" && grep -q "last scales: 1e+12, 5e+11" "$T/err" && grep -q "step 9" "$T/err" \
  && pass train_fp16_scale_collapse_message || fail train_fp16_scale_collapse_message "$(head -c 300 "$T/err")"

