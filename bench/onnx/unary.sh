#!/usr/bin/env bash
# keel vs ONNX Runtime 1.30 (onnxruntime-node, CPU) on single-op graphs of
# 1M float32 elements (bench/onnx/unary_models.py): every unary/elementwise
# activation, PRelu with a per-channel slope, Clip and Pow with a constant
# exponent. Keel and ORT are measured interleaved (op by op, thread count by
# thread count, ROUNDS times), each run reporting the median of ITERS runs
# after WARMUP; the table gives the median over the rounds and keel/ORT,
# for the one-op graph and per op from a chain of CHAIN (9) copies of the op
# ((chain - single) / (CHAIN - 1): the op's own cost without the per-run
# overhead, which for ORT through node includes handing the output to JS).
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
CHAIN=${CHAIN:-9}
if [ -z "${ORT_NODE_MODULES:-}" ] && [ ! -d "$BUILD/npm/node_modules/onnxruntime-node" ]; then
  mkdir -p "$BUILD/npm"
  npm install --ignore-scripts --no-audit --no-fund --prefix "$BUILD/npm" onnxruntime-node@1.30.0 >&2
fi
all=$(/usr/bin/python3 bench/onnx/unary_models.py "$dir")
/usr/bin/python3 bench/onnx/unary_models.py "$dir/chain$CHAIN" "$CHAIN" > /dev/null
ops=${*:-$all}
p50() { /usr/bin/python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["p50_ms"])'; }
declare -A K O
for r in $(seq "$ROUNDS"); do
  for op in $ops; do
    x="$dir/x.npy"
    case "$op" in log|sqrt|pow0.5|pow1.7) x="$dir/xpos.npy";; esac
    for t in $THREADS; do
      for m in "$op.onnx" "chain$CHAIN/$op.onnx"; do
        k=$("$KEEL" --threads "$t" bench "$dir/$m" --iters "$ITERS" --warmup "$WARMUP" --input "x=$x" --json | p50)
        o=$(node bench/onnx/ort_bench.js "$dir/$m" "$t" "$ITERS" "$WARMUP" 1 "x=$x" | p50)
        K[$m:$t]="${K[$m:$t]:-} $k"
        O[$m:$t]="${O[$m:$t]:-} $o"
      done
    done
  done
done
med() { /usr/bin/python3 -c 'import statistics,sys; print("%.3f" % statistics.median(float(v) for v in sys.argv[1:]))' "$@"; }
echo "| op | threads | keel p50 ms | ORT p50 ms | keel/ORT | keel ms/op (chain) | ORT ms/op (chain) | keel/ORT per op |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for op in $ops; do
  for t in $THREADS; do
    km=$(med ${K[$op.onnx:$t]})
    om=$(med ${O[$op.onnx:$t]})
    kc=$(med ${K[chain$CHAIN/$op.onnx:$t]})
    oc=$(med ${O[chain$CHAIN/$op.onnx:$t]})
    /usr/bin/python3 -c "
km, om, kc, oc, c = $km, $om, $kc, $oc, $CHAIN
kd, od = (kc - km) / (c - 1), (oc - om) / (c - 1)
print('| $op | $t | %.3f | %.3f | %.2f | %.3f | %.3f | %s |' % (km, om, km / om, kd, od, '%.2f' % (kd / od) if od > 0 else 'n/a'))"
  done
done
