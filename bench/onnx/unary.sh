#!/usr/bin/env bash
# keel vs ONNX Runtime 1.30 (onnxruntime-node, CPU) on single-op graphs of
# 1M float32 elements (bench/onnx/unary_models.py): every unary/elementwise
# activation, PRelu with a per-channel slope, Clip and Pow with a constant
# exponent. Keel and ORT are measured interleaved (op by op, thread count by
# thread count, ROUNDS times), each run reporting the median of ITERS runs
# after WARMUP; the table gives the median over the rounds and keel/ORT.
# Usage: bench/onnx/unary.sh [OP...]   Env: ITERS (20), WARMUP (5), ROUNDS
# (3), THREADS ("1 2").
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
KEEL="$root/$BUILD/keel"
dir="$BUILD/bench-unary"
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-"1 2"}
if [ -z "${ORT_NODE_MODULES:-}" ] && [ ! -d "$BUILD/npm/node_modules/onnxruntime-node" ]; then
  mkdir -p "$BUILD/npm"
  npm install --ignore-scripts --no-audit --no-fund --prefix "$BUILD/npm" onnxruntime-node@1.30.0 >&2
fi
all=$(/usr/bin/python3 bench/onnx/unary_models.py "$dir")
ops=${*:-$all}
p50() { /usr/bin/python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["p50_ms"])'; }
declare -A K O
for r in $(seq "$ROUNDS"); do
  for op in $ops; do
    x="$dir/x.npy"
    case "$op" in log|sqrt|pow0.5|pow1.7) x="$dir/xpos.npy";; esac
    for t in $THREADS; do
      k=$("$KEEL" --threads "$t" bench "$dir/$op.onnx" --iters "$ITERS" --warmup "$WARMUP" --input "x=$x" --json | p50)
      o=$(node bench/onnx/ort_bench.js "$dir/$op.onnx" "$t" "$ITERS" "$WARMUP" 1 "x=$x" | p50)
      K[$op:$t]="${K[$op:$t]:-} $k"
      O[$op:$t]="${O[$op:$t]:-} $o"
    done
  done
done
med() { /usr/bin/python3 -c 'import statistics,sys; print("%.3f" % statistics.median(float(v) for v in sys.argv[1:]))' "$@"; }
echo "| op | threads | keel p50 ms | ORT p50 ms | keel/ORT |"
echo "|---|---:|---:|---:|---:|"
for op in $ops; do
  for t in $THREADS; do
    km=$(med ${K[$op:$t]})
    om=$(med ${O[$op:$t]})
    echo "| $op | $t | $km | $om | $(/usr/bin/python3 -c "print('%.2f' % ($km / $om))") |"
  done
done
