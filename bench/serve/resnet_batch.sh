#!/usr/bin/env bash
# bench/serve: does batching make ResNet-18 cheaper per image on this CPU?
# (the question behind the serve batching goal). Times the model itself,
# no server: `keel bench`, ONNX Runtime 1.30 (onnxruntime-node) and PyTorch
# (torchvision's resnet18, eval, inference_mode) at each batch size and
# intra-op thread count, rounds interleaved; prints ms per image per run,
# the medians, and each runtime's gain from batching (ms per image at batch
# 1 over the best batch). Batching can raise served throughput only as far
# as the per-image time of a batch is below batch 1's at the same threads.
# Usage: bench/serve/resnet_batch.sh [ROUNDS] [IMAGES]   (each timing runs
#   about IMAGES images: IMAGES/B iterations, at least 2)
#   env BATCHES (default "1 8 16 32"), THREADS (default "1 2"), TORCH=0 skips PyTorch
set -eu
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
KEEL=${KEEL:-$root/build/keel}; PY=/usr/bin/python3
rounds=${1:-3}; images=${2:-32}
batches=${BATCHES:-1 8 16 32}; threads=${THREADS:-1 2}
models=$root/build/bench-serve-models
$PY "$root/tests/onnx/export_models.py" "$models" resnet18 >&2
m=$models/resnet18/model.onnx
w=$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-rb-XXXXXX"); trap 'rm -rf "$w"' EXIT
$PY - "$w" $batches <<'PY'
import sys
import numpy as np
for b in sys.argv[2:]:
    b = int(b)
    np.save("%s/x%d.npy" % (sys.argv[1], b), np.random.default_rng(0).standard_normal((b, 3, 224, 224)).astype(np.float32))
PY
have_ort=1; [ -d "$root/build/npm/node_modules/onnxruntime-node" ] || { have_ort=0; echo "(no onnxruntime-node in build/npm: ORT rows skipped; bench/onnx/run.sh installs it)" >&2; }
have_torch=1; [ "${TORCH:-1}" != 0 ] && $PY -c 'import torch, torchvision' 2>/dev/null || have_torch=0
cat > "$w/torch_time.py" <<'PY'
import sys, time, warnings
warnings.simplefilter("ignore")
import numpy as np, torch, torchvision
threads, iters, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(threads)
m = torchvision.models.resnet18(weights=None).eval()
x = torch.from_numpy(np.load(path))
ts = []
with torch.inference_mode():
    for i in range(iters + 1):  # the first run is a warm-up
        t = time.perf_counter(); m(x); ts.append(time.perf_counter() - t)
ts = sorted(ts[1:])
print("%.1f" % (ts[len(ts) // 2] * 1000.0 / x.shape[0]))
PY
: > "$w/rows"
for r in $(seq "$rounds"); do
  for t in $threads; do
    for b in $batches; do
      it=$(( (images + b - 1) / b )); [ "$it" -lt 2 ] && it=2
      ms=$("$KEEL" bench "$m" --threads "$t" --batch "$b" --iters "$it" --warmup 1 --json |
        $PY -c 'import json,sys; d=json.load(sys.stdin); print("%.1f" % (1000.0 / d["throughput"]))')
      echo "keel t$t b$b $ms" | tee -a "$w/rows"
      if [ "$have_ort" = 1 ]; then
        ms=$(node "$root/bench/onnx/ort_bench.js" "$m" "$t" "$it" 1 "$b" "x=$w/x$b.npy" |
          $PY -c 'import json,sys; d=json.load(sys.stdin); print("%.1f" % (1000.0 / d["throughput"]))')
        echo "ort t$t b$b $ms" | tee -a "$w/rows"
      fi
      if [ "$have_torch" = 1 ]; then
        echo "pytorch t$t b$b $($PY "$w/torch_time.py" "$t" "$it" "$w/x$b.npy")" | tee -a "$w/rows"
      fi
    done
  done
done
echo "medians, ms per image (load average $(cut -d' ' -f1-3 /proc/loadavg)):"
$PY - "$w/rows" <<'PY'
import statistics, sys
v = {}
for line in open(sys.argv[1]):
    rt, t, b, ms = line.split()
    v.setdefault((rt, int(t[1:]), int(b[1:])), []).append(float(ms))
med = {k: statistics.median(x) for k, x in v.items()}
bs = sorted({k[2] for k in med})
print("| runtime | threads | " + " | ".join("batch %d" % b for b in bs) + " | batch 1 / best batch |")
print("|---|---|" + "---|" * len(bs) + "---|")
for rt in ("keel", "ort", "pytorch"):
    for t in sorted({k[1] for k in med if k[0] == rt}):
        row = [med.get((rt, t, b)) for b in bs]
        best = min(x for x in row if x is not None)
        gain = "%.2fx" % (med[(rt, t, 1)] / best) if (rt, t, 1) in med else "-"
        print("| %s | %d | %s | %s |" % (rt, t, " | ".join("%.1f" % x if x is not None else "-" for x in row), gain))
PY
