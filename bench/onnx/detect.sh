#!/usr/bin/env bash
# keel vs ONNX Runtime 1.30 (onnxruntime-node, CPU) on torchvision's
# SSDlite320-MobileNetV3 exported by tests/onnx/export_detectors.py (the
# parity test's model and image: seeded random weights, 50 detections), batch
# 1 (one image), same model file and input, same thread counts, in one run.
# Prints a markdown table of median latencies and keel/ORT, rounds
# interleaved. Usage: bench/onnx/detect.sh [MODEL...] (default ssdlite).
# Env: ITERS (default 10), THREADS ("1 2"), ROUNDS (default 15: short
# interleaved bursts, as the load of a shared machine hits one tool at a time).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
KEEL="$root/$BUILD/keel"
dir="$BUILD/onnx-detectors"
ITERS=${ITERS:-10}
THREADS=${THREADS:-"1 2"}
ROUNDS=${ROUNDS:-15}
if [ ! -d "$BUILD/npm/node_modules/onnxruntime-node" ]; then
  mkdir -p "$BUILD/npm"
  npm install --ignore-scripts --no-audit --no-fund --prefix "$BUILD/npm" onnxruntime-node@1.30.0 >&2
fi
models=${*:-ssdlite}
/usr/bin/python3 tests/onnx/export_detectors.py "$dir" $models >&2
p50() { /usr/bin/python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["p50_ms"])'; }
echo "| model | threads | keel p50 ms | ORT p50 ms | keel/ORT |"
echo "|---|---:|---:|---:|---:|"
for m in $models; do
  for t in $THREADS; do
    ks=""; os=""
    for _ in $(seq "$ROUNDS"); do
      ks="$ks $("$KEEL" --threads "$t" bench "$dir/$m/model.onnx" --iters "$ITERS" --warmup 3 --input "x=$dir/$m/x.npy" --json | p50)"
      os="$os $(node bench/onnx/ort_bench.js "$dir/$m/model.onnx" "$t" "$ITERS" 3 1 "x=$dir/$m/x.npy" | p50)"
    done
    # the median of the rounds' medians
    kp=$(echo $ks | tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    op=$(echo $os | tr ' ' '\n' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "| $m | $t | $kp | $op | $(/usr/bin/python3 -c "print('%.2f' % ($kp / $op))") |"
  done
done
