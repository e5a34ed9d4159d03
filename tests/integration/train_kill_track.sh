# kill -9 of a tracked keel train (issue 22: the metrics were written only at
# the end, so a run killed after many epochs had 0 points and duration 0):
# every finished epoch is logged to the store in its own transaction, and the
# next open of the store marks the dead run killed with what it logged.
. "$KEEL_SRC/tests/integration/lib.sh"
export KEEL_TRACKING="$T/store"
cd "$T"
$PYTHON - <<'PY' || { fail train_kill_track_data "numpy needed"; exit 0; }
import numpy as np
r = np.random.default_rng(0)
x = r.standard_normal((8000, 16)).astype(np.float32)
np.save("x.npy", x)
np.save("y.npy", (x[:, 0] + x[:, 1] > 0).astype(np.int64))
PY
cat > spec.yaml <<'YAML'
seed: 1
input: {shape: [16]}
layers:
  - {type: linear, out: 64}
  - {type: relu}
  - {type: linear, out: 2}
loss: {type: cross_entropy}
optimizer: {type: sgd, lr: 0.01}
train: {epochs: 100000, batch_size: 32, val_fraction: 0.1}
data: {x: x.npy, y: y.npy}
YAML
$KEEL train spec.yaml --out m --track --quiet > train.out 2> train.err &
pid=$!
# wait (polling the store, bounded) until a few epochs are logged and a
# heartbeat after the start is recorded
got=0
for _ in $(seq 600); do
  if $KEEL runs show 1 --json > show.json 2>/dev/null && $PYTHON - show.json 2>/dev/null <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
m = r["metrics"]
assert r["status"] == "running"
assert m["train_loss"]["step"] >= 4 and "val_loss" in m
assert r["heartbeat_us"] > r["start_us"]
PY
  then got=1; break; fi
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
[ $got = 1 ] && pass train_kill_track_epochs_logged || { fail train_kill_track_epochs_logged "no epochs in the store while training: $(cat show.json 2>/dev/null | head -c 300) $(head -c 300 train.err)"; exit 0; }
expect_rc train_kill_track_show 0 $KEEL runs show 1 --json
$PYTHON - "$T/out" 2>"$T/py.err" <<'PY' && pass train_kill_track_killed_keeps_points || fail train_kill_track_killed_keeps_points "$(cat "$T/py.err")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "killed", r["status"]
assert r["points"] >= 10, r["points"]          # >= 5 epochs of train_loss + val_loss (+ val_accuracy)
assert r["metrics"]["train_loss"]["step"] >= 4, r["metrics"]
assert r["end_us"] is not None and r["end_us"] > r["start_us"], (r["start_us"], r["end_us"])
PY
expect_rc train_kill_track_history 0 $KEEL runs list --filter 'status = "killed" and duration > 0'
grep -q "spec.yaml" "$T/out" && pass train_kill_track_listed || fail train_kill_track_listed "$(head -c 300 "$T/out")"
exit 0
