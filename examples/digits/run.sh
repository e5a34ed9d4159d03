#!/usr/bin/env bash
# One command per model: examples/digits/run.sh mlp|cnn [KEEL]
# Exports the digits data, trains, then evaluates on the held-out test split.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
model=${1:-mlp}
keel=${2:-$here/../../build/keel}
[ -f "$here/data/y_test.npy" ] || /usr/bin/python3 "$here/prepare.py" "$here/data"
x=x_test.npy; [ "$model" = cnn ] && x=x_test_img.npy
"$keel" train "$here/$model.yaml" --out "$here/out-$model" --quiet
"$keel" eval "$here/out-$model" --data "$here/data/$x,$here/data/y_test.npy"
