#!/usr/bin/env bash
# bench/serve: ResNet-18 (torchvision, random weights, exported at bench time
# by tests/onnx/export_models.py) served by keel with the binary tensor data
# extension at 32 connections, dynamic batching on vs off, runs interleaved
# (off, on, off, on, ...). Prints one line per run and the medians. A run
# must be long against the time of one batch (ResNet-18 is ~50-200 ms per
# image here, so a 16-image batch takes seconds): requests still in flight
# when wrk stops are not counted.
# Usage: bench/serve/resnet.sh [SECONDS] [ROUNDS] [CONNECTIONS]
#   env KEEL, WORKERS (default: cores), THREADS (intra-op per worker, default 1),
#   MAX_BATCH (8), DELAY_US (max_queue_delay_us, default 20000)
set -eu
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
KEEL=${KEEL:-$root/build/keel}; PY=/usr/bin/python3
dur=${1:-40}; rounds=${2:-2}; conns=${3:-32}
for t in wrk "$KEEL"; do command -v "$t" >/dev/null || { echo "bench/serve: $t missing (make deps / make)"; exit 1; }; done
models=$root/build/bench-serve-models   # exported once, reused
$PY "$root/tests/onnx/export_models.py" "$models" resnet18 >&2
w=$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-resnet-XXXXXX"); kp=
trap '[ -n "$kp" ] && kill $kp 2>/dev/null; rm -rf "$w"' EXIT
for mode in on off; do
  mkdir -p "$w/$mode/resnet/1"; ln -s "$models/resnet18/model.onnx" "$w/$mode/resnet/1/model.onnx"
done
workers=${WORKERS:-$(nproc)}
# both modes run up to one batch (or request) per worker at a time
printf 'max_batch_size: %d\ninstances: %d\ndynamic_batching:\n  max_queue_delay_us: %d\n' "${MAX_BATCH:-8}" "$workers" \
  "${DELAY_US:-20000}" > "$w/on/resnet/config.yaml"
printf 'max_batch_size: 0\ninstances: %d\n' "$workers" > "$w/off/resnet/config.yaml"
HEADER_LEN=$($PY - "$w/body.bin" <<'PY'
import json, sys
import numpy as np
x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
h = json.dumps({"id": "bench", "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3, 224, 224],
                "parameters": {"binary_data_size": x.nbytes}}],
                "parameters": {"binary_data_output": True}}).encode()
open(sys.argv[1], "wb").write(h + x.tobytes())
print(len(h))
PY
)
export BODY_FILE="$w/body.bin" HEADER_LEN
run() { # mode
  "$KEEL" serve "$w/$1" --port 0 --workers "$workers" --threads-per-worker "${THREADS:-1}" --no-access-log \
    > "$w/keel.out" 2> "$w/keel.err" & kp=$!
  for i in $(seq 300); do grep -q listening "$w/keel.out" 2>/dev/null && break; sleep 0.1; done
  local port=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$w/keel.out") url
  url="http://127.0.0.1:$port/v2/models/resnet/infer"
  rm -f "$w/resp"
  local st=$(curl -s -o "$w/resp" -w '%{http_code}' -X POST -H "Inference-Header-Content-Length: $HEADER_LEN" \
    --data-binary @"$BODY_FILE" "$url")
  [ "$st" = 200 ] || { echo "bench/serve: keel answered $st; its log: $(tail -5 "$w/keel.err")"; exit 1; }
  curl -s -o /dev/null -X POST -H "Inference-Header-Content-Length: $HEADER_LEN" --data-binary @"$BODY_FILE" "$url"  # warm
  wrk -t2 -c"$conns" -d"${dur}s" --timeout 30s --latency -s "$here/post_bin.lua" "$url" > "$w/wrk.out"
  local rps=$(awk '/^Requests\/sec/ {print $2}' "$w/wrk.out") p50=$(awk '$1=="50%" {print $2}' "$w/wrk.out")
  local p99=$(awk '$1=="99%" {print $2}' "$w/wrk.out") errs=$(grep -E "Non-2xx|Socket errors" "$w/wrk.out" | tr '\n' ' ' || true)
  # mean batch, and model compute time per image (the batch's compute time over its rows; on a loaded
  # machine the steadier measure of what batching buys)
  local mb=$(curl -s "http://127.0.0.1:$port/metrics" | awk '
    /^keel_inference_batch_size_sum\{model="resnet",version="[^"]*"\}/ {bs+=$2} /^keel_inference_batch_size_count\{model="resnet",version="[^"]*"\}/ {bc+=$2}
    /^keel_inference_compute_duration_seconds_sum\{model="resnet",version="[^"]*"\}/ {cs+=$2} /^keel_inference_compute_duration_seconds_count\{model="resnet",version="[^"]*"\}/ {cc+=$2}
    END {if (bc && cc) printf "%.1f %.1f", bs/bc, cs/cc/(bs/bc)*1000; else printf "- -"}')
  kill -9 $kp; wait $kp 2>/dev/null || true; kp=  # no drain of the requests wrk left behind
  echo "$1 $rps $p50 $p99 $mb load=$(cut -d' ' -f1 /proc/loadavg) ${errs}"
}
echo "# mode req/s p50 p99 mean_batch compute_ms/image load errors"
for i in $(seq "$rounds"); do run off; run on; done | tee "$w/runs"
$PY - "$w/runs" <<'PY'
import statistics, sys
v, c = {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if f and f[0] in ("on", "off"):
        v.setdefault(f[0], []).append(float(f[1]))
        if f[5] != "-":
            c.setdefault(f[0], []).append(float(f[5]))
med = {k: statistics.median(x) for k, x in v.items()}
for k in ("off", "on"):
    if k in med:
        print("median %s: %.2f req/s (runs: %s)" % (k, med[k], ", ".join("%.2f" % x for x in v[k])))
if med.get("off"):
    print("batching on/off: %.2fx req/s" % (med["on"] / med["off"]))
if c.get("on") and c.get("off"):
    print("compute per image off/on: %.2fx" % (statistics.median(c["off"]) / statistics.median(c["on"])))
PY
