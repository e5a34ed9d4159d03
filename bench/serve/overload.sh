#!/usr/bin/env bash
# bench/serve overload: keel serve under 2x overload with 20 % high-priority
# traffic, open loop (bench/serve/loadgen.c: fixed send rate, latency from
# the scheduled send time, so shed 503s do not raise the offered load the way
# closed-loop wrk connections do).
#   capacity C: closed-loop wrk at priority 1 (no shedding), req/s; for ResNet-18 with
#               one connection per worker (batches of 1: the phases' Poisson traffic
#               seldom batches, and 0.4*C of a batched capacity overloads phase A)
#   phase A:    high priority alone, open loop at 0.4*C
#   phase B:    the same high traffic + low priority at 1.6*C (total 2*C, 20 % high),
#               one loadgen, classes drawn by a seeded RNG
# Level 2 has a queue limit and a default timeout so it is shed with 503s.
# Reports per round: high success, high p99 in B vs A (ratio), low shed %,
# the allocator's reserved bytes (max of /metrics samples during B) vs the
# budget, and whether the server is alive; then the medians over rounds.
# Usage: bench/serve/overload.sh [SECONDS] [ROUNDS]
#   env MODEL=resnet (ResNet-18, binary extension, compute-bound) | mlp (784-512-512-10, JSON)
#       WORKERS (default: cores), MAX_BATCH (resnet 4, mlp 32), LOW_QUEUE (max_queue_size of
#       level 2; resnet 8, mlp 64), LOW_TIMEOUT_US (level 2 default timeout; 100000),
#       EXTRA_CFG (more config.yaml lines, e.g. "reserve_instances: 0" per level via
#       LEVEL2_EXTRA=", reserve_instances: 0"), CAPACITY (skip the measurement), KEEL
set -eu
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
KEEL=${KEEL:-$root/build/keel}; PY=/usr/bin/python3; LG=$root/build/loadgen
dur=${1:-10}; rounds=${2:-3}; model=${MODEL:-resnet}; workers=${WORKERS:-$(nproc)}
for t in wrk curl cc "$KEEL"; do command -v "$t" >/dev/null || { echo "bench/serve: $t missing (make deps / make)"; exit 1; }; done
cc -O2 -Wall -o "$LG" "$here/loadgen.c" -lm
w=$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-overload-XXXXXX"); kp=; sp=
trap '[ -n "$sp" ] && kill $sp 2>/dev/null; [ -n "$kp" ] && kill $kp 2>/dev/null; rm -rf "$w"' EXIT
if [ "$model" = resnet ]; then
  models=$root/build/bench-serve-models   # exported once, reused (as resnet.sh)
  $PY "$root/tests/onnx/export_models.py" "$models" resnet18 >&2
  mkdir -p "$w/repo/m/1"; ln -s "$models/resnet18/model.onnx" "$w/repo/m/1/model.onnx"
  HEADER_LEN=$($PY - "$w/body" <<'PY'
import json, sys
import numpy as np
x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
h = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3, 224, 224],
                "parameters": {"binary_data_size": x.nbytes}}],
                "parameters": {"binary_data_output": True}}).encode()
open(sys.argv[1], "wb").write(h + x.tobytes())
print(len(h))
PY
)
  lgbody=(--body "$w/body" --header-len "$HEADER_LEN"); wrkscript=$here/post_bin.lua; export HEADER_LEN
  mb=${MAX_BATCH:-4}; lq=${LOW_QUEUE:-8}; capconns=$workers
else
  KEEL_SRC=$root $PY "$here/mlp_setup.py" "$w" "$w/repo" --id ''
  mv "$w/repo/mlp" "$w/repo/m"; mv "$w/body.json" "$w/body"
  lgbody=(--body "$w/body"); wrkscript=$here/post.lua
  mb=${MAX_BATCH:-32}; lq=${LOW_QUEUE:-64}; capconns=16
fi
export BODY_FILE="$w/body"
cat > "$w/repo/m/config.yaml" <<YAML
max_batch_size: $mb
dynamic_batching:
  max_queue_delay_us: 0
instances: $workers
priority_levels: 2
default_priority: 2
queue_policy:
  1: {max_queue_size: 0}
  2: {max_queue_size: $lq, default_timeout_us: ${LOW_TIMEOUT_US:-100000}${LEVEL2_EXTRA:-}}
${EXTRA_CFG:-}
YAML
"$KEEL" --memory-limit 2G serve "$w/repo" --port 0 --workers "$workers" --no-access-log > "$w/keel.out" 2> "$w/keel.err" & kp=$!
for i in $(seq 300); do grep -q listening "$w/keel.out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$w/keel.out"); base=http://127.0.0.1:$port; url=$base/v2/models/m/infer
[ -n "$port" ] || { echo "bench/serve: keel did not start: $(tail -5 "$w/keel.err")"; exit 1; }
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), model $model, workers $workers, max_batch $mb, level 2 queue $lq, load $(cut -d' ' -f1-3 /proc/loadavg)"
sed 's/^/# config.yaml: /' "$w/repo/m/config.yaml"
if [ -n "${CAPACITY:-}" ]; then cap=$CAPACITY; else
  PRIORITY=1 wrk -t1 -c"$capconns" -d3s --timeout 10s -s "$wrkscript" "$url" > /dev/null  # warm-up
  PRIORITY=1 wrk -t1 -c"$capconns" -d"$(( dur < 8 ? dur : 8 ))s" --timeout 10s -s "$wrkscript" "$url" > "$w/cap.wrk"
  cap=$(awk '/^Requests\/sec/ {print $2}' "$w/cap.wrk")
fi
echo "# capacity C = $cap req/s (closed loop, $capconns connections, priority 1)"
sample() { # max of the allocator's reserved bytes while B runs
  local m=0 v; while :; do
    v=$(curl -s "$base/metrics" | awk '/^keel_memory_reserved_bytes/ {s+=$2} END {printf "%d", s}')
    [ "${v:-0}" -gt "$m" ] && { m=$v; echo "$m" > "$w/peak"; }; sleep 0.5; done
}
hi=$($PY -c "print(0.4 * $cap)"); tot=$($PY -c "print(2.0 * $cap)")
idle() { # waits (up to 60 s) until nothing is queued or running: a phase's backlog must not spill into the next
  for i in $(seq 600); do
    curl -s "$base/metrics" | awk '/^keel_(queue_length|inference_running)\{/ {s+=$2} END {exit s > 0}' && return 0; sleep 0.1
  done
}
echo "# round phase high_ok/sent high_p99_ms low_ok/sent low_shed% high_ratio reserved_bytes load"
for r in $(seq "$rounds"); do
  idle
  "$LG" --url "$url" --rate "$hi" --duration "$dur" --poisson --seed "$r" "${lgbody[@]}" --max-conns 512 \
    --class 'high:1:X-Priority: 1' --json > "$w/a$r.json"
  idle; echo 0 > "$w/peak"; sample & sp=$!
  "$LG" --url "$url" --rate "$tot" --duration "$dur" --poisson --seed "$r" "${lgbody[@]}" --max-conns 512 \
    --class 'high:0.2:X-Priority: 1' --class 'low:0.8:X-Priority: 2' --json > "$w/b$r.json"
  kill $sp; wait $sp 2>/dev/null || true; sp=
  $PY - "$w/a$r.json" "$w/b$r.json" "$r" "$(cat "$w/peak")" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY' | tee -a "$w/rounds"
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ah = a["classes"][0]; bh, bl = b["classes"]
ok = lambda c: "%d/%d" % (c["ok"], c["scheduled"])
shed = 100.0 * bl["status"].get("503", 0) / max(1, bl["scheduled"])
print("%s A %s %.2f - - - - %s" % (sys.argv[3], ok(ah), ah["latency_ms"]["p99"], sys.argv[5]))
print("%s B %s %.2f %s %.1f %.2f %s %s" % (sys.argv[3], ok(bh), bh["latency_ms"]["p99"], ok(bl), shed,
      bh["latency_ms"]["p99"] / max(1e-9, ah["latency_ms"]["p99"]), sys.argv[4], sys.argv[5]))
PY
done
alive=$(curl -s -o /dev/null -w "%{http_code}" "$base/v2/health/live" || true)
budget=$(curl -s "$base/metrics" | awk '/^keel_memory_budget_bytes\{tag="total"\}/ {print $2}')
$PY - "$w/rounds" "$cap" "$alive" "$budget" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
A = [r for r in rows if r[1] == "A"]; B = [r for r in rows if r[1] == "B"]
succ = lambda s: 100.0 * int(s.split("/")[0]) / max(1, int(s.split("/")[1]))
med = lambda xs: st.median(xs)
print("median over %d rounds: C %s req/s; A: high p99 %.2f ms; B: high success %.3f %% (min %.3f), high p99 %.2f ms,"
      " ratio B/A %.2fx (per round: %s), low shed %.1f %%, low success %.1f %%"
      % (len(B), sys.argv[2], med([float(r[3]) for r in A]), med([succ(r[2]) for r in B]), min(succ(r[2]) for r in B),
         med([float(r[3]) for r in B]), med([float(r[6]) for r in B]), ", ".join(r[6] for r in B),
         med([float(r[5]) for r in B]), med([succ(r[4]) for r in B])))
print("allocator reserved bytes during B: max %d (budget %s); server alive after overload: HTTP %s"
      % (max(int(r[7]) for r in B), sys.argv[4], sys.argv[3]))
PY
