#!/usr/bin/env bash
# keel vs ONNX Runtime 1.30 (onnxruntime-node, CPU) on the parity models
# (exported by tests/onnx/export_models.py), same model files, same inputs,
# same thread counts, in one run. Prints a markdown table of median latencies
# and the ratio keel/ORT. Usage: bench/onnx/run.sh [MODEL...]
# Env: ITERS (default 20; batch-32 CNN rows use ITERS/4), THREADS ("1 2").
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
KEEL="$root/$BUILD/keel"
models_dir="$BUILD/onnx-models"
inputs_dir="$BUILD/bench-inputs"
ITERS=${ITERS:-20}
THREADS=${THREADS:-"1 2"}
if [ ! -d "$BUILD/npm/node_modules/onnxruntime-node" ]; then
  mkdir -p "$BUILD/npm"
  npm install --ignore-scripts --no-audit --no-fund --prefix "$BUILD/npm" onnxruntime-node@1.30.0 >&2
fi
/usr/bin/python3 tests/onnx/export_models.py "$models_dir" >&2
models=${*:-"mlp resnet18 mobilenet_v2 transformer"}
echo "| model | batch | threads | keel p50 ms | ORT p50 ms | keel/ORT |"
echo "|---|---:|---:|---:|---:|---:|"
for m in $models; do
  for b in 1 32; do
    feeds=$(/usr/bin/python3 bench/onnx/make_inputs.py "$inputs_dir" "$m" "$b")
    it=$ITERS
    case "$m:$b" in resnet18:32|mobilenet_v2:32) it=$(( ITERS / 4 > 3 ? ITERS / 4 : 3 ));; esac
    kin=""
    for f in $feeds; do kin="$kin --input $f"; done
    for t in $THREADS; do
      k=$("$KEEL" --threads "$t" bench "$models_dir/$m/model.onnx" --batch "$b" --iters "$it" --warmup 2 $kin --json)
      o=$(node bench/onnx/ort_bench.js "$models_dir/$m/model.onnx" "$t" "$it" 2 "$b" $feeds)
      kp=$(echo "$k" | /usr/bin/python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["p50_ms"])')
      op=$(echo "$o" | /usr/bin/python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["p50_ms"])')
      r=$(/usr/bin/python3 -c "print('%.2f' % ($kp / $op))")
      echo "| $m | $b | $t | $kp | $op | $r |"
    done
  done
done
