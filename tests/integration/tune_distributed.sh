# Several workers on one study (issue 28 §3), on the SQLite store and on a
# real PostgreSQL server: 3 `keel tune` processes share one 30-trial study;
# one is killed with kill -9 in the middle of a trial. The study ends with
# exactly 30 complete trials, no number complete twice, the killed worker's
# trial failed ("worker lost") and re-run by another worker, and a best value
# within 2 % of a single worker's study with the same seed and spec. A third
# worker paused (SIGSTOP) past the heartbeat timeout mid-trial has its trial
# re-queued too, and drops its result when it goes on.
. "$KEEL_SRC/tests/integration/lib.sh"
. "$KEEL_SRC/tests/integration/lib_pg.sh"
cd "$T"
$PYTHON "$KEEL_SRC/examples/digits/prepare.py" "$T/data" > /dev/null || { fail tune_dist_prepare_data "prepare.py failed"; exit 0; }
cat > spec.yaml <<'Y'
seed: 1
input: {shape: [64]}
layers:
  - {type: linear, out: 32}
  - {type: relu}
  - {type: linear, out: 10}
loss: {type: cross_entropy}
optimizer: {type: adamw, lr: 0.003, weight_decay: 0.01}
train: {epochs: 2, batch_size: 64, val_fraction: 0.2}
data: {x: data/x_train.npy, y: data/y_train.npy}
Y
cat > space.yaml <<'Y'
optimizer.lr: {type: float, low: 0.0003, high: 0.05, log: true}
layers.0.out: {type: int, low: 16, high: 96, step: 16}
Y
HB=3 # --heartbeat-timeout: the lost trial is re-queued 3 s after its worker died

# Freezes worker $1 (a pid, progress lines in $2) with SIGSTOP while it
# trains a trial: stopped, then kept stopped only when its last progress line
# is a trial start.
freeze_mid_trial() {
  local pid=$1 log=$2 _
  for _ in $(seq 400); do
    if grep -q ': started' "$log" 2> /dev/null; then
      kill -STOP "$pid" 2> /dev/null || return 1
      tail -n 1 "$log" | grep -q ': started' && return 0
      kill -CONT "$pid"
    fi
    sleep 0.05
  done
  return 1
}

# run_backend NAME STORE: the single-worker reference and the 3-worker study
run_backend() {
  local b=$1 store=$2
  local common=(tune spec.yaml --space space.yaml --trials 30 --seed 7 --heartbeat-timeout $HB)
  local t0 t1
  expect_rc "${b}_single_worker" 0 "$KEEL" --tracking "$store" "${common[@]}" --study single --out "$T/$b-single" --json
  cp "$T/out" "$T/$b-single.json"
  t0=$(date +%s%N)
  for w in 1 2 3; do
    "$KEEL" --tracking "$store" "${common[@]}" --study dist --out "$T/$b-dist" --json > "$T/$b-w$w.out" 2> "$T/$b-w$w.err" &
    eval "pid$w=\$!"
  done
  if freeze_mid_trial "$pid2" "$T/$b-w2.err"; then
    kill -9 "$pid2"
    wait "$pid2" 2> /dev/null
    pass "${b}_worker_killed_mid_trial"
  else
    fail "${b}_worker_killed_mid_trial" "$(tail -c 300 "$T/$b-w2.err")"
  fi
  # worker 3 pauses past the timeout in the middle of a trial: another worker
  # re-queues it; when it goes on, it drops its result
  if freeze_mid_trial "$pid3" "$T/$b-w3.err"; then
    sleep $((HB + 3))
    kill -CONT "$pid3"
    pass "${b}_worker_paused_mid_trial"
  else
    fail "${b}_worker_paused_mid_trial" "$(tail -c 300 "$T/$b-w3.err")"
  fi
  local rc1=0 rc3=0
  wait "$pid1" || rc1=$?
  wait "$pid3" || rc3=$?
  t1=$(date +%s%N)
  [ "$rc1" = 0 ] && [ "$rc3" = 0 ] && pass "${b}_survivors_finish" ||
    fail "${b}_survivors_finish" "exit $rc1, $rc3: $(tail -c 300 "$T/$b-w1.err") $(tail -c 300 "$T/$b-w3.err")"
  [ $(((t1 - t0) / 1000000000)) -lt 100 ] && pass "${b}_distributed_in_time" || fail "${b}_distributed_in_time" "$(((t1 - t0) / 1000000000)) s"
  expect_rc "${b}_list_trials" 0 "$KEEL" --tracking "$store" runs list --limit 0 --json \
    --filter 'tags.kind = "trial" and tags.study = "dist"'
  $PYTHON - "$T/out" "$T/$b-single.json" <<'P' && pass "${b}_exactly_30_complete_lost_rerun_same_best" || fail "${b}_exactly_30_complete_lost_rerun_same_best" "$(tail -n 1 "$T/check.err")"
import json, sys
from collections import Counter
runs = json.load(open(sys.argv[1]))
single = json.load(open(sys.argv[2]))
sys.stderr = open(sys.argv[1].rsplit("/", 1)[0] + "/check.err", "w")
state = lambda r: r["tags"].get("state")
num = lambda r: int(r["tags"]["trial"])
complete = [r for r in runs if state(r) == "complete"]
done = Counter(num(r) for r in complete)
assert len(complete) == 30 and sorted(done) == list(range(30)), ("complete trials", sorted(done.items()))
lost = [r for r in runs if r["tags"].get("lost") == "1"]
assert len(lost) >= 2, ("the killed and the paused worker's trials were not both marked lost", len(lost))
for r in lost:
    assert state(r) == "failed" and r["status"] == "failed" and "worker lost" in r["tags"].get("error", ""), r["tags"]
    assert done[num(r)] == 1, ("lost trial not re-run", num(r))
    # its re-run (itself lost again, possibly: then re-run in turn) names it and has the same point
    rerun = [x for x in runs if x["tags"].get("requeued_from") == str(r["id"])]
    assert len(rerun) == 1 and num(rerun[0]) == num(r), ("re-runs of", r["id"], [x["tags"] for x in rerun])
    assert rerun[0]["params"] == r["params"], (rerun[0]["params"], r["params"])
assert not [r for r in runs if r["status"] == "running"], "a trial is still running"
points = Counter(tuple(sorted(r["params"].items())) for r in complete if "cached" not in r["tags"].get("note", ""))
assert max(points.values()) == 1, ("a point trained twice", points.most_common(1))
best = max(r["metrics"]["objective"]["value"] for r in complete)
ref = single["best"]["value"]
assert abs(best - ref) <= 0.02 * abs(ref), ("best", best, "single worker", ref)
print("# %d trial runs, %d lost and re-run; best %.4f, single worker %.4f" % (len(runs), len(lost), best, ref),
      file=sys.__stdout__)
P
  grep -q "re-queued" "$T/$b-w1.err" "$T/$b-w3.err" && pass "${b}_requeue_said" || fail "${b}_requeue_said" "$(tail -c 300 "$T/$b-w1.err")"
  grep -q "lost (another worker marked it failed after no heartbeat); not recorded" "$T/$b-w3.err" &&
    pass "${b}_paused_worker_drops_lost_result" || fail "${b}_paused_worker_drops_lost_result" "$(tail -c 400 "$T/$b-w3.err")"
}

run_backend sqlite "$T/runs"

if pg_available; then
  if pg_start; then
    export KEEL_ARTIFACTS="$T/art"
    url=$(pg_newdb tune_dist) && mkdir -p "$T/art" && run_backend pg "$url" ||
      fail pg_tune_dist_database "could not create it"
  fi
else
  echo "SKIP tune_distributed PostgreSQL: no server binaries in $PG_BIN (mk/packages.txt: postgresql)"
fi
