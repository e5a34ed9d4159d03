#!/usr/bin/env bash
# Quantized CNNs: keel int8 vs keel fp32 and vs ONNX Runtime 1.30 int8
# (onnxruntime-node, CPU) on QDQ ResNet-18 and MobileNetV2 built by
# bench/onnx/qdq_quantize.py from the exported fp32 parity models (per-channel
# int8 weights, calibrated uint8 activations), the same model files and
# inputs, batch 1 and 8, 1 and 2 threads, each tool measured right after the
# other. Prints a markdown table of median latencies, keel fp32/int8 (the
# int8 speed-up) and keel/ORT on the int8 model. ORT is installed into
# build/npm like run.sh does; when it cannot be (offline, no npm cache) its
# columns say "n/a". Usage: bench/onnx/quant.sh [MODEL...]
# Env: ITERS (default 10; batch-8 rows use ITERS/2, at least 3), THREADS ("1 2"), BATCHES ("1 8").
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
KEEL="$root/$BUILD/keel"
models_dir="$BUILD/onnx-models"
qdq_dir="$BUILD/qdq-models"
inputs_dir="$BUILD/bench-inputs"
ITERS=${ITERS:-10}
THREADS=${THREADS:-"1 2"}
BATCHES=${BATCHES:-"1 8"}
ort=1
if [ ! -d "$BUILD/npm/node_modules/onnxruntime-node" ]; then
  mkdir -p "$BUILD/npm"
  npm install --ignore-scripts --no-audit --no-fund --prefix "$BUILD/npm" onnxruntime-node@1.30.0 >&2 || ort=0
fi
models=${*:-"resnet18 mobilenet_v2"}
/usr/bin/python3 tests/onnx/export_models.py "$models_dir" $models >&2
mkdir -p "$qdq_dir"
p50() { /usr/bin/python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["p50_ms"])'; }
echo "| model | batch | threads | keel int8 p50 ms | keel fp32 p50 ms | int8 speed-up (fp32/int8) | ORT int8 p50 ms | keel/ORT int8 |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for m in $models; do
  q="$qdq_dir/$m.onnx"
  [ -f "$q" ] || /usr/bin/python3 bench/onnx/qdq_quantize.py "$models_dir/$m/model.onnx" "$q" --calib 4 >&2
  for b in $BATCHES; do
    feeds=$(/usr/bin/python3 bench/onnx/make_inputs.py "$inputs_dir" "$m" "$b")
    it=$ITERS
    [ "$b" -gt 1 ] && it=$(( ITERS / 2 > 3 ? ITERS / 2 : 3 ))
    kin=""
    for f in $feeds; do kin="$kin --input $f"; done
    for t in $THREADS; do
      ki=$("$KEEL" --threads "$t" bench "$q" --batch "$b" --iters "$it" --warmup 2 $kin --json | p50)
      kf=$("$KEEL" --threads "$t" bench "$models_dir/$m/model.onnx" --batch "$b" --iters "$it" --warmup 2 $kin --json | p50)
      su=$(/usr/bin/python3 -c "print('%.2f' % ($kf / $ki))")
      oi=n/a r=n/a
      if [ "$ort" = 1 ]; then
        oi=$(node bench/onnx/ort_bench.js "$q" "$t" "$it" 2 "$b" $feeds | p50)
        r=$(/usr/bin/python3 -c "print('%.2f' % ($ki / $oi))")
      fi
      echo "| $m | $b | $t | $ki | $kf | $su | $oi | $r |"
    done
  done
done
