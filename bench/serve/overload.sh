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
# budget, the load average, and the server's own p99 queue wait and compute
# time of the high-priority requests (from its access log: what the
# scheduler controls vs what CPU contention does); then the medians over
# rounds and whether the servers are alive.
# Usage: bench/serve/overload.sh [SECONDS] [ROUNDS]
#   env MODEL=resnet (ResNet-18, binary extension, compute-bound) | mlp (784-512-512-10, JSON)
#       WORKERS (default: cores), HTTP_THREADS (default 1), MAX_BATCH (resnet 4, mlp 32), LOW_QUEUE (max_queue_size of
#       level 2; resnet 8, mlp 64), LOW_TIMEOUT_US (level 2 default timeout; 100000),
#       LEVEL2 (more level-2 queue policy keys, e.g. "max_batch_size: 1"), COMPARE (level-2
#       keys of more configurations, ';' between them, each run side by side with the default
#       on its own server, interleaved round by round, e.g.
#       COMPARE="reserve_instances: 0;nice: 10, max_batch_size: 1"), CAPACITY (skip the
#       measurement), KEEL, KEEL_CPUS / GEN_CPUS (CPU lists for taskset: the server(s) on
#       some cores, wrk and the load generator on the others, e.g. KEEL_CPUS=1 GEN_CPUS=0;
#       C is then measured on the server's cores: without it the generator and the
#       server share every core, and an HTTP-bound model's overload is the generator's)
set -eu
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
KEEL=${KEEL:-$root/build/keel}; PY=/usr/bin/python3; LG=$root/build/loadgen
dur=${1:-10}; rounds=${2:-3}; model=${MODEL:-resnet}; workers=${WORKERS:-$(nproc)}
kpin=(); gpin=()
[ -n "${KEEL_CPUS:-}" ] && kpin=(taskset -c "$KEEL_CPUS")
[ -n "${GEN_CPUS:-}" ] && gpin=(taskset -c "$GEN_CPUS")
for t in wrk curl cc "$KEEL" ${KEEL_CPUS:+taskset}; do command -v "$t" >/dev/null || { echo "bench/serve: $t missing (make deps / make)"; exit 1; }; done
cc -O2 -Wall -o "$LG" "$here/loadgen.c" -lm
w=$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-overload-XXXXXX"); kp=; sp=
trap '[ -n "$sp" ] && kill $sp 2>/dev/null; [ -n "$kp" ] && kill $kp 2>/dev/null; rm -rf "$w"' EXIT  # kp: server pids
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
# the configurations compared, interleaved round by round on their own servers (one runs at a time)
cfgs=(default); declare -A base pid extra
if [ -n "${COMPARE:-}" ]; then
  IFS=';' read -ra alts <<< "$COMPARE"
  for i in "${!alts[@]}"; do cfgs+=("alt$((i + 1))"); extra[alt$((i + 1))]=", ${alts[$i]}"; done
fi
for c in "${cfgs[@]}"; do
  mkdir -p "$w/$c"; cp -r "$w/repo" "$w/$c/"
  cat > "$w/$c/repo/m/config.yaml" <<YAML
max_batch_size: $mb
dynamic_batching:
  max_queue_delay_us: 0
instances: $workers
priority_levels: 2
default_priority: 2
queue_policy:
  1: {max_queue_size: 0}
  2: {max_queue_size: $lq, default_timeout_us: ${LOW_TIMEOUT_US:-100000}${LEVEL2:+, $LEVEL2}${extra[$c]:-}}
YAML
  "${kpin[@]}" "$KEEL" --memory-limit 2G serve "$w/$c/repo" --port 0 --workers "$workers" --http-threads "${HTTP_THREADS:-1}" > "$w/$c/keel.out" 2> "$w/$c/keel.err" &
  pid[$c]=$!; kp="$kp ${pid[$c]}"
  for i in $(seq 300); do grep -q listening "$w/$c/keel.out" 2>/dev/null && break; sleep 0.1; done
  port=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$w/$c/keel.out")
  [ -n "$port" ] || { echo "bench/serve: keel did not start: $(tail -5 "$w/$c/keel.err")"; exit 1; }
  base[$c]=http://127.0.0.1:$port
  grep 'queue_policy\|  [12]:' "$w/$c/repo/m/config.yaml" | tr '\n' ' ' | sed "s/^/# $c config.yaml: /"; echo
done
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), model $model, workers $workers, max_batch $mb, level 2 queue $lq, load $(cut -d' ' -f1-3 /proc/loadavg)${KEEL_CPUS:+, server on CPUs $KEEL_CPUS}${GEN_CPUS:+, generator on CPUs $GEN_CPUS}"
url=${base[default]}/v2/models/m/infer
if [ -n "${CAPACITY:-}" ]; then cap=$CAPACITY; else
  PRIORITY=1 "${gpin[@]}" wrk -t1 -c"$capconns" -d3s --timeout 10s -s "$wrkscript" "$url" > /dev/null  # warm-up
  PRIORITY=1 "${gpin[@]}" wrk -t1 -c"$capconns" -d"$(( dur < 8 ? dur : 8 ))s" --timeout 10s -s "$wrkscript" "$url" > "$w/cap.wrk"
  cap=$(awk '/^Requests\/sec/ {print $2}' "$w/cap.wrk")
fi
echo "# capacity C = $cap req/s (closed loop, $capconns connections, priority 1)"
sample() { # base: max of the allocator's reserved bytes while B runs
  local m=0 v; while :; do
    v=$(curl -s "$1/metrics" | awk '/^keel_memory_reserved_bytes/ {s+=$2} END {printf "%d", s}')
    [ "${v:-0}" -gt "$m" ] && { m=$v; echo "$m" > "$w/peak"; }; sleep 0.5; done
}
idle() { # base: waits (up to 60 s) until nothing is queued or running: a phase's backlog must not spill into the next
  for i in $(seq 600); do
    curl -s "$1/metrics" | awk '/^keel_(queue_length|inference_running)\{/ {s+=$2} END {exit s > 0}' && return 0; sleep 0.1
  done
}
hi=$($PY -c "print(0.4 * $cap)"); tot=$($PY -c "print(2.0 * $cap)")
echo "# config round phase high_ok/sent high_p99_ms low_ok/sent low_shed% high_ratio reserved_bytes load server_high_p99_queue/compute_ms"
for r in $(seq "$rounds"); do
  for c in "${cfgs[@]}"; do
    url=${base[$c]}/v2/models/m/infer
    idle "${base[$c]}"; la=$(wc -l < "$w/$c/keel.err")
    "${gpin[@]}" "$LG" --url "$url" --rate "$hi" --duration "$dur" --poisson --seed "$r" "${lgbody[@]}" --max-conns 512 \
      --class 'high:1:X-Priority: 1' --json > "$w/a.json"
    idle "${base[$c]}"; echo 0 > "$w/peak"; sample "${base[$c]}" & sp=$!; lb=$(wc -l < "$w/$c/keel.err")
    "${gpin[@]}" "$LG" --url "$url" --rate "$tot" --duration "$dur" --poisson --seed "$r" "${lgbody[@]}" --max-conns 512 \
      --class 'high:0.2:X-Priority: 1' --class 'low:0.8:X-Priority: 2' --json > "$w/b.json"
    kill $sp; wait $sp 2>/dev/null || true; sp=; idle "${base[$c]}"
    $PY - "$w/a.json" "$w/b.json" "$c $r" "$(cat "$w/peak")" "$(cut -d' ' -f1 /proc/loadavg)" "$w/$c/keel.err" "$la" "$lb" \
      <<'PY' | tee -a "$w/rounds"
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ah = a["classes"][0]; bh, bl = b["classes"]
ok = lambda c: "%d/%d" % (c["ok"], c["scheduled"])
shed = 100.0 * bl["status"].get("503", 0) / max(1, bl["scheduled"])
# the server's own view of the priority-1 requests (access log): queue wait and compute p99, ms
lines = open(sys.argv[6]).read().splitlines()
def split(lo, hi):
    q, c = [], []
    for l in lines[lo:hi]:
        try:
            d = json.loads(l)
        except ValueError:
            continue
        if d.get("priority") == 1 and d.get("status") == 200:
            q.append(float(d["queue_ms"])); c.append(float(d["compute_ms"]))
    p99 = lambda x: sorted(x)[max(0, -(-99 * len(x) // 100) - 1)] if x else 0
    return "%.1f/%.1f" % (p99(q), p99(c))
la, lb = int(sys.argv[7]), int(sys.argv[8])
print("%s A %s %.2f - - - - %s %s" % (sys.argv[3], ok(ah), ah["latency_ms"]["p99"], sys.argv[5], split(la, lb)))
print("%s B %s %.2f %s %.1f %.2f %s %s %s" % (sys.argv[3], ok(bh), bh["latency_ms"]["p99"], ok(bl), shed,
      bh["latency_ms"]["p99"] / max(1e-9, ah["latency_ms"]["p99"]), sys.argv[4], sys.argv[5], split(lb, len(lines))))
PY
  done
done
for c in "${cfgs[@]}"; do
  alive=$(curl -s -o /dev/null -w "%{http_code}" "${base[$c]}/v2/health/live" || true)
  kill -0 "${pid[$c]}" 2>/dev/null || alive="$alive (process gone)"
  budget=$(curl -s "${base[$c]}/metrics" | awk '/^keel_memory_budget_bytes\{tag="total"\}/ {print $2}')
  $PY - "$w/rounds" "$cap" "$alive" "$budget" "$c" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if l.split()[0] == sys.argv[5]]
A = [r for r in rows if r[2] == "A"]; B = [r for r in rows if r[2] == "B"]
succ = lambda s: 100.0 * int(s.split("/")[0]) / max(1, int(s.split("/")[1]))
med = lambda xs: st.median(xs)
print("%s: median over %d rounds: C %s req/s; A: high p99 %.2f ms; B: high success %.3f %% (min %.3f), high p99 %.2f ms,"
      " ratio B/A %.2fx (per round: %s), low shed %.1f %%, low success %.1f %%"
      % (sys.argv[5], len(B), sys.argv[2], med([float(r[4]) for r in A]), med([succ(r[3]) for r in B]),
         min(succ(r[3]) for r in B), med([float(r[4]) for r in B]), med([float(r[7]) for r in B]),
         ", ".join(r[7] for r in B), med([float(r[6]) for r in B]), med([succ(r[5]) for r in B])))
print("%s: allocator reserved bytes during B: max %d (budget %s); server alive after overload: HTTP %s"
      % (sys.argv[5], max(int(r[8]) for r in B), sys.argv[4], sys.argv[3]))
PY
done
