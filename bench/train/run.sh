#!/usr/bin/env bash
# bench/train: keel train vs PyTorch 1.13 on the same machine, threads and
# batches, in one run: (a) MLP 784-512-512-10, batch 128, AdamW; (b) CNN
# conv3x3(32)-pool-conv3x3(64)-pool-fc128-fc10 on 28x28, batch 64, AdamW;
# plus the machine's SGEMM rate. Prints medians of REPS runs and the ratios.
# Usage: bench/train/run.sh [THREADS...]   (default: 1 2); REPS=3 STEPS_MLP=40 STEPS_CNN=20
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
KEEL=${KEEL:-$root/build/keel}
W=${W:-$root/build/bench-train}
REPS=${REPS:-3}; SM=${STEPS_MLP:-40}; SC=${STEPS_CNN:-20}
threads=("$@"); [ ${#threads[@]} -eq 0 ] && threads=(1 2)
mkdir -p "$W"
cc -O2 -o "$W/sgemm" "$root/bench/train/sgemm.c" $(pkg-config --cflags --libs openblas)
/usr/bin/python3 - "$W" <<'PY'
import numpy as np, sys
w = sys.argv[1]; r = np.random.RandomState(0)
np.save(w + "/x_mlp.npy", r.rand(128 * 40, 784).astype(np.float32)); np.save(w + "/y_mlp.npy", r.randint(0, 10, 128 * 40))
np.save(w + "/x_cnn.npy", r.rand(64 * 20, 1, 28, 28).astype(np.float32)); np.save(w + "/y_cnn.npy", r.randint(0, 10, 64 * 20))
PY
cat > "$W/mlp.yaml" <<Y
seed: 1
input: {shape: [784]}
layers: [{type: linear, out: 512}, {type: relu}, {type: linear, out: 512}, {type: relu}, {type: linear, out: 10}]
optimizer: {type: adamw, lr: 0.001}
train: {epochs: 100, batch_size: 128, val_fraction: 0}
data: {x: x_mlp.npy, y: y_mlp.npy}
Y
cat > "$W/cnn.yaml" <<Y
seed: 1
input: {shape: [1, 28, 28]}
layers:
  - {type: conv2d, out: 32, kernel: 3, padding: 1}
  - {type: relu}
  - {type: maxpool2d, kernel: 2}
  - {type: conv2d, out: 64, kernel: 3, padding: 1}
  - {type: relu}
  - {type: maxpool2d, kernel: 2}
  - {type: flatten}
  - {type: linear, out: 128}
  - {type: relu}
  - {type: linear, out: 10}
optimizer: {type: adamw, lr: 0.001}
train: {epochs: 100, batch_size: 64, val_fraction: 0}
data: {x: x_cnn.npy, y: y_cnn.npy}
Y
median() { sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
keel_sps() { "$KEEL" train "$W/$1.yaml" --out "$W/out-$1" --quiet --json --threads "$2" --max-steps "$3" | sed -E 's/.*"samples_per_s":([0-9.]+).*/\1/'; }
printf "%-8s %-4s %12s %12s %7s %14s\n" model thr keel_sps torch_sps ratio sgemm_gflops
for t in "${threads[@]}"; do
  g=$(for i in $(seq "$REPS"); do "$W/sgemm" 1024 "$t" 5; done | median)
  for m in mlp cnn; do
    steps=$SM; b=128; [ $m = cnn ] && { steps=$SC; b=64; }
    k=$(for i in $(seq "$REPS"); do keel_sps $m "$t" "$steps"; done | median)
    p=$(for i in $(seq "$REPS"); do /usr/bin/python3 "$root/bench/train/torch_bench.py" $m "$W/x_$m.npy" "$W/y_$m.npy" $b "$steps" "$t"; done | median)
    printf "%-8s %-4s %12.0f %12.0f %7.2f %14s\n" $m "$t" "$k" "$p" "$(echo "$k / $p" | bc -l)" "$g"
    if [ $m = mlp ]; then
      # MLP FLOPs per sample: 3 GEMMs forward + 6 backward (2 per layer; first layer's dx skipped)
      f=$(echo "2*(784*512+512*512+512*10)*3 - 2*784*512" | bc)
      echo "         keel MLP GEMM rate: $(echo "$k * $f / 1e9" | bc -l | cut -c1-6) GFLOP/s = $(echo "100 * $k * $f / 1e9 / $g" | bc -l | cut -c1-5) % of SGEMM"
    fi
  done
done
