#!/usr/bin/env bash
# The defects example, end to end: generate the metal-surface inspection
# images (good / scratch / dent; 20k train with seed 1, 2k test with seed 2,
# 256x256), pack them into shards (validated, deterministic, resumable), then
# train the small CNN of cnn.yaml through the data loader and evaluate it on
# the test shards (train.sh).
#   examples/defects/run.sh [KEEL]      N=20000 TEST_N=2000 SIZE=256 THREADS=2
# Reruns reuse what is there: datagen is skipped when the images exist and
# pack is a no-op for an unchanged source.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
keel=${1:-${KEEL:-$here/../../build/keel}}
N=${N:-20000}; TEST_N=${TEST_N:-2000}; SIZE=${SIZE:-256}; THREADS=${THREADS:-2}
data=$here/data
mkdir -p "$data"
make_set() { # name n seed
  if [ ! -f "$data/$1_img/labels.csv" ]; then
    "$keel" datagen defects --out "$data/$1_img" --n "$2" --size "$SIZE" --seed "$3" --threads "$THREADS"
  fi
  "$keel" pack "$data/$1_img" --out "$data/$1_shards" --shard-size 64M --threads "$THREADS"
}
make_set train "$N" 1
make_set test "$TEST_N" 2
if [ -f "$here/train.sh" ]; then
  KEEL=$keel bash "$here/train.sh"
else
  echo "examples/defects: no train.sh yet (training on shards comes with the data loader); shards in $data"
fi
