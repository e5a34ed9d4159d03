#!/usr/bin/env bash
# bench/train/mpi.sh: data-parallel keel train on MPI (issue 27), in one run on
# this machine: samples/s of 2 ranks x 1 thread against 1 rank x 1 thread
# (batch 128 per rank: the 2-rank run's global batch is 256), the 2-rank step
# with the gradient all-reduce against the same step without it
# (--no-allreduce, the baseline of the communication cost), and PyTorch 1.13
# DistributedDataParallel (gloo) 2 processes x 1 thread on the same model,
# per-process batch and optimizer; MLP 784-512-512-10 and the 28x28 CNN of
# bench/train/run.sh (batch 64 per rank). Medians of REPS runs; writes
# bench/results/train-mpi-*.json (then tools/bench_table.py render). Meant for a quiet
# machine (two idle cores): on a loaded one the ratios say little.
# Usage: bench/train/mpi.sh   (REPS=3 STEPS_MLP=60 STEPS_CNN=30)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
KEEL=${KEEL:-$root/build/keel}
W=${W:-$root/build/bench-train-mpi}
REPS=${REPS:-3}; SM=${STEPS_MLP:-60}; SC=${STEPS_CNN:-30}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
MPI="mpirun --oversubscribe --bind-to none -np 2"
mkdir -p "$W"
/usr/bin/python3 - "$W" <<'PY'
import numpy as np, sys
w = sys.argv[1]; r = np.random.RandomState(0)
np.save(w + "/x_mlp.npy", r.rand(256 * 30, 784).astype(np.float32)); np.save(w + "/y_mlp.npy", r.randint(0, 10, 256 * 30))
np.save(w + "/x_cnn.npy", r.rand(128 * 30, 1, 28, 28).astype(np.float32)); np.save(w + "/y_cnn.npy", r.randint(0, 10, 128 * 30))
PY
spec() { # model global-batch -> spec file
  local f="$W/$1-$2.yaml"
  if [ "$1" = mlp ]; then
    printf '%s\n' "seed: 1" "input: {shape: [784]}" \
      "layers: [{type: linear, out: 512}, {type: relu}, {type: linear, out: 512}, {type: relu}, {type: linear, out: 10}]" > "$f"
  else
    printf '%s\n' "seed: 1" "input: {shape: [1, 28, 28]}" "layers:" \
      "  - {type: conv2d, out: 32, kernel: 3, padding: 1}" "  - {type: relu}" "  - {type: maxpool2d, kernel: 2}" \
      "  - {type: conv2d, out: 64, kernel: 3, padding: 1}" "  - {type: relu}" "  - {type: maxpool2d, kernel: 2}" \
      "  - {type: flatten}" "  - {type: linear, out: 128}" "  - {type: relu}" "  - {type: linear, out: 10}" > "$f"
  fi
  printf '%s\n' "optimizer: {type: adamw, lr: 0.001}" "train: {epochs: 100, batch_size: $2, val_fraction: 0}" \
    "data: {x: x_$1.npy, y: y_$1.npy}" >> "$f"
  echo "$f"
}
median() { sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
sps() { sed -nE 's/.*"samples_per_s":([0-9.]+).*/\1/p' | head -1; }
printf "%-5s %12s %12s %12s %12s %8s %8s %8s\n" model 1r_sps 2r_sps 2r_noar_sps ddp2_sps scale ar_cost vs_ddp
for m in mlp cnn; do
  b=128; steps=$SM; [ $m = cnn ] && { b=64; steps=$SC; }
  s1=$(spec $m $b); s2=$(spec $m $((2 * b)))
  k1=$(for i in $(seq "$REPS"); do "$KEEL" train "$s1" --out "$W/o1" --quiet --no-track --json --threads 1 --max-steps "$steps" | sps; done | median)
  k2=$(for i in $(seq "$REPS"); do $MPI "$KEEL" train "$s2" --out "$W/o2" --quiet --no-track --json --threads 1 --max-steps "$steps" | sps; done | median)
  k0=$(for i in $(seq "$REPS"); do $MPI "$KEEL" train "$s2" --out "$W/o0" --quiet --no-track --json --threads 1 --max-steps "$steps" --no-allreduce | sps; done | median)
  p2=$(for i in $(seq "$REPS"); do /usr/bin/python3 "$root/bench/train/torch_ddp.py" $m "$W/x_$m.npy" "$W/y_$m.npy" $b "$steps" 1 2; done | median)
  sc=$(awk -v a="$k2" -v b="$k1" 'BEGIN{printf "%.2f", a/b}'); ar=$(awk -v a="$k0" -v b="$k2" 'BEGIN{printf "%.2f", a/b}')
  vd=$(awk -v a="$k2" -v b="$p2" 'BEGIN{printf "%.2f", a/b}')
  printf "%-5s %12.0f %12.0f %12.0f %12.0f %8s %8s %8s\n" $m "$k1" "$k2" "$k0" "$p2" "$sc" "$ar" "$vd"
  eval "k1_$m=$k1 k2_$m=$k2 k0_$m=$k0 p2_$m=$p2 sc_$m=$sc ar_$m=$ar vd_$m=$vd"
done
load=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load average: $load"
day=$(date -u +%F)
mach="$(nproc)-core $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load average $load during the run"
rec() { # id order what peer ratio unit note
  /usr/bin/python3 - "$root/bench/results/$1.json" "$1" "$2" "$3" "$4" "$5" "$6" "$mach" "$day" "$7" <<'PY'
import json, sys
p, i, o, what, peer, ratio, unit, mach, day, note = sys.argv[1:11]
r = {"id": i, "order": int(o), "area": "train-mpi", "what": what, "peer": peer, "ratio": float(ratio), "unit": unit, "machine": mach,
     "date": day, "command": "bash bench/train/mpi.sh", "source": "bench/train/mpi.sh: " + note}
with open(p + ".tmp", "w") as f:
    json.dump(r, f, indent=2, ensure_ascii=False); f.write("\n")
import os; os.replace(p + ".tmp", p)
PY
}
rec train-mpi-mlp-scaling 300 "data-parallel MLP 784-512-512-10, b128/rank, 2 ranks x 1 thread vs 1 rank x 1 thread, samples/s" "keel 1 rank" "$sc_mlp" "× samples/s (goal >= 1.8)" "1 rank $k1_mlp, 2 ranks $k2_mlp samples/s"
rec train-mpi-cnn-scaling 301 "data-parallel CNN 28×28, b64/rank, 2 ranks x 1 thread vs 1 rank x 1 thread, samples/s" "keel 1 rank" "$sc_cnn" "× samples/s (goal >= 1.8)" "1 rank $k1_cnn, 2 ranks $k2_cnn samples/s"
rec train-mpi-mlp-allreduce 302 "data-parallel MLP, 2 ranks: step time with the gradient all-reduce / without (--no-allreduce)" "keel --no-allreduce" "$ar_mlp" "× step time (goal <= 1.1)" "without $k0_mlp, with $k2_mlp samples/s"
rec train-mpi-cnn-allreduce 305 "data-parallel CNN 28×28, 2 ranks: step time with the gradient all-reduce / without (--no-allreduce)" "keel --no-allreduce" "$ar_cnn" "× step time (goal <= 1.1)" "without $k0_cnn, with $k2_cnn samples/s"
rec train-mpi-mlp-ddp 303 "data-parallel MLP 784-512-512-10, b128/process, 2 x 1 thread, AdamW, samples/s" "PyTorch 1.13 DDP (gloo)" "$vd_mlp" "× samples/s (goal >= 1.5)" "keel $k2_mlp, DDP $p2_mlp samples/s"
rec train-mpi-cnn-ddp 304 "data-parallel CNN 28×28, b64/process, 2 x 1 thread, AdamW, samples/s" "PyTorch 1.13 DDP (gloo)" "$vd_cnn" "× samples/s (goal >= 1.5)" "keel $k2_cnn, DDP $p2_cnn samples/s"
