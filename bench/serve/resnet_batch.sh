#!/usr/bin/env bash
# bench/serve: does batching make ResNet-18 cheaper per image on this CPU?
# (the question behind the serve batching goal). Times the model itself,
# no server: `keel bench` and ONNX Runtime 1.30 (onnxruntime-node) at batch
# 1 and 8, 1 and 2 intra-op threads, rounds interleaved; prints ms per image
# per run and the medians. Batching can raise served throughput only as far
# as the per-image time at batch 8 is below batch 1's at the same threads.
# Usage: bench/serve/resnet_batch.sh [ROUNDS] [ITERS_B1]   (batch 8 runs ITERS_B1/4 iterations)
set -eu
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
KEEL=${KEEL:-$root/build/keel}; PY=/usr/bin/python3
rounds=${1:-3}; it1=${2:-12}; it8=$(( (it1 + 3) / 4 ))
models=$root/build/bench-serve-models
$PY "$root/tests/onnx/export_models.py" "$models" resnet18 >&2
m=$models/resnet18/model.onnx
w=$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-rb-XXXXXX"); trap 'rm -rf "$w"' EXIT
$PY - "$w" <<'PY'
import sys
import numpy as np
for b in (1, 8):
    np.save("%s/x%d.npy" % (sys.argv[1], b), np.random.default_rng(0).standard_normal((b, 3, 224, 224)).astype(np.float32))
PY
have_ort=1; [ -d "$root/build/npm/node_modules/onnxruntime-node" ] || { have_ort=0; echo "(no onnxruntime-node in build/npm: ORT rows skipped; bench/onnx/run.sh installs it)" >&2; }
: > "$w/rows"
for r in $(seq "$rounds"); do
  for t in 1 2; do
    for b in 1 8; do
      it=$([ "$b" = 1 ] && echo "$it1" || echo "$it8")
      ms=$("$KEEL" bench "$m" --threads "$t" --batch "$b" --iters "$it" --warmup 2 --json |
        $PY -c 'import json,sys; d=json.load(sys.stdin); print("%.1f" % (1000.0 / d["throughput"]))')
      echo "keel t$t b$b $ms" | tee -a "$w/rows"
      if [ "$have_ort" = 1 ]; then
        ms=$(node "$root/bench/onnx/ort_bench.js" "$m" "$t" "$it" 2 "$b" "x=$w/x$b.npy" |
          $PY -c 'import json,sys; d=json.load(sys.stdin); print("%.1f" % (1000.0 / d["throughput"]))')
        echo "ort t$t b$b $ms" | tee -a "$w/rows"
      fi
    done
  done
done
echo "medians, ms per image (load average $(cut -d' ' -f1-3 /proc/loadavg)):"
awk '{k=$1" "$2" "$3; v[k]=v[k]" "$4} END {for (k in v) print k, v[k]}' "$w/rows" | sort | while read -r a b c rest; do
  echo "$a $b $c $(echo $rest | tr ' ' '\n' | sort -n | awk '{x[NR]=$1} END {print x[int((NR+1)/2)]}')"
done
