#!/usr/bin/env bash
# Training on image shards end to end (small): keel datagen defects -> keel
# pack -> keel train through the loader -> keel eval --shards. Checks: the
# run and its loader statistics, bit-identical models for any worker count
# and after kill -9 + --resume mid-epoch, a resume against another dataset,
# and spec errors.
. "$KEEL_SRC/tests/integration/lib.sh"
cd "$T" || exit 1
if ! { $KEEL datagen defects --out img --n 360 --size 64 --seed 1 && $KEEL datagen defects --out timg --n 120 --size 64 --seed 2 &&
       $KEEL pack img --out sh && $KEEL pack timg --out tsh; } > prep.log 2>&1; then
  fail images_train_data "datagen/pack failed: $(tail -c 300 prep.log)"; exit 0
fi
cat > cnn.yaml <<'Y'
seed: 3
input: {shape: [3, 32, 32]}
layers:
  - {type: conv2d, out: 8, kernel: 3, padding: 1}
  - {type: batchnorm2d}
  - {type: relu}
  - {type: maxpool2d, kernel: 2}
  - {type: conv2d, out: 16, kernel: 3, padding: 1}
  - {type: relu}
  - {type: global_avgpool}
  - {type: flatten}
  - {type: linear, out: 3}
loss: {type: cross_entropy}
optimizer: {type: adamw, lr: 0.01}
train: {epochs: 2, batch_size: 32, val_fraction: 0.1, checkpoint_every: 4}
data:
  shards: sh
  image: {size: 32, resize: 36, crop: random, flip: true, workers: 2}
Y
if expect_rc images_train_runs 0 $KEEL train cnn.yaml --out r1 --quiet --json; then
  if $PYTHON - r1 "$(cat "$T/out")" <<'PY'
import json, sys
j = json.loads(sys.argv[2])
assert j["steps"] == 22 and 0 <= j["loader_wait_share"] <= 1 and j["loader_images_per_s"] > 0, j
m = json.load(open(sys.argv[1] + "/meta.json"))
assert len(m["data"]["shards_id"]) == 64 and "wait_share" in m["loader"] and m["data"]["train_rows"] == 324, m["data"]
PY
  then pass images_train_loader_stats; else fail images_train_loader_stats "$(cat "$T/out")"; fi
fi
sed 's/workers: 2/workers: 3/' cnn.yaml > cnn3.yaml
$KEEL train cnn3.yaml --out r3 --quiet > /dev/null 2>&1
if cmp -s r1/model.safetensors r3/model.safetensors; then pass images_train_same_model_any_workers; else fail images_train_same_model_any_workers "models differ for 2 and 3 workers"; fi
KEEL_TRAIN_CRASH_AT_STEP=14 $KEEL_HOOKS train cnn.yaml --out r2 --quiet > /dev/null 2>&1
$KEEL train cnn.yaml --out r2 --resume --quiet > /dev/null 2> resume.err
if cmp -s r1/model.safetensors r2/model.safetensors; then pass images_train_resume_bit_identical; else fail images_train_resume_bit_identical "$(tail -c 300 resume.err)"; fi
sed 's/shards: sh/shards: tsh/' cnn.yaml > other.yaml
cp -r r2 r4
$KEEL train other.yaml --out r4 --resume --quiet > /dev/null 2> other.err
rc=$?
if [ $rc = 1 ] && grep -q "another dataset" other.err; then pass images_train_resume_other_dataset; else fail images_train_resume_other_dataset "rc $rc: $(head -c 300 other.err)"; fi
if expect_rc images_eval_shards 0 $KEEL eval r1 --shards tsh --json; then
  if $PYTHON -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['rows']==120 and 0<=j['accuracy']<=1 and len(j['confusion'])==3, j" "$T/out"; then
    pass images_eval_shards_json; else fail images_eval_shards_json "$(cat "$T/out")"; fi
fi
sed 's/size: 32, resize: 36/size: 48, resize: 52/' cnn.yaml > bad.yaml
$KEEL train bad.yaml --out rb --quiet > /dev/null 2> bad.err
if [ $? = 1 ] && grep -q "data.image.size 48" bad.err; then pass images_train_bad_size; else fail images_train_bad_size "$(head -c 300 bad.err)"; fi
sed 's/workers: 2/workers: 2, multiple: 32, undistort: {fx: 60, fy: 60, cx: 32, cy: 32, k1: -0.2, k2: 0.05, p1: 0, p2: 0, width: 64, height: 64}/' cnn.yaml > ud.yaml
expect_rc images_train_undistort_multiple 0 $KEEL train ud.yaml --out rud --quiet --max-steps 3
sed 's/crop: random/crop: diagonal/' cnn.yaml > bad2.yaml
$KEEL train bad2.yaml --out rb --quiet > /dev/null 2> bad2.err
if [ $? = 1 ] && grep -q "crop" bad2.err; then pass images_train_bad_crop; else fail images_train_bad_crop "$(head -c 300 bad2.err)"; fi
exit 0
