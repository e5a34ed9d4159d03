#!/usr/bin/env bash
# Trains the defects CNN (cnn.yaml) through the loader and evaluates it on
# the held-out test shard set. Makes the data when it is not there yet:
# 20k train images (seed 1) and 2k test images (seed 2), 256x256, packed.
#   examples/defects/train.sh [OUT_DIR]      (N=20000 TEST_N=2000 to change sizes)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
KEEL=${KEEL:-$here/../../build/keel}
N=${N:-20000}; TEST_N=${TEST_N:-2000}
out=${1:-$here/out-cnn}
mkdir -p "$here/data"
if [ ! -f "$here/data/train_shards/manifest.json" ]; then
  "$KEEL" datagen defects --out "$here/data/train_img" --n "$N" --size 256 --seed 1
  "$KEEL" pack "$here/data/train_img" --out "$here/data/train_shards"
fi
if [ ! -f "$here/data/test_shards/manifest.json" ]; then
  "$KEEL" datagen defects --out "$here/data/test_img" --n "$TEST_N" --size 256 --seed 2
  "$KEEL" pack "$here/data/test_img" --out "$here/data/test_shards"
fi
"$KEEL" train "$here/cnn.yaml" --out "$out"
"$KEEL" eval "$out" --shards "$here/data/test_shards"
