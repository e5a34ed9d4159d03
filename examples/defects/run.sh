#!/usr/bin/env bash
# The defects example: generate the metal-surface inspection images
# (good / scratch / dent), pack them into shards, then train a small CNN on
# them through the data loader.
#   examples/defects/run.sh [KEEL]      N=20000 SIZE=256 SEED=1 THREADS=2
# Reruns reuse what is there: datagen is skipped when labels.csv exists with
# the same N/SIZE/SEED, and pack is a no-op for an unchanged source.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
keel=${1:-$here/../../build/keel}
N=${N:-20000}; SIZE=${SIZE:-256}; SEED=${SEED:-1}; THREADS=${THREADS:-2}
data=$here/data; images=$data/images-$N-$SIZE-$SEED; shards=$data/shards-$N-$SIZE-$SEED

# 1. images
if [ ! -f "$images/labels.csv" ]; then
  "$keel" datagen defects --out "$images" --n "$N" --size "$SIZE" --seed "$SEED" --threads "$THREADS"
fi
# 2. shards (validated, deterministic, resumable)
"$keel" pack "$images" --out "$shards" --shard-size 64M --threads "$THREADS"
# 3. training on the shards (needs the loader's image training: cnn.yaml)
if [ -f "$here/cnn.yaml" ]; then
  "$keel" train "$here/cnn.yaml" --set data.shards="$shards" --out "$here/out-cnn"
else
  echo "examples/defects: no cnn.yaml yet (training on shards comes with the data loader); data is ready in $shards"
fi
