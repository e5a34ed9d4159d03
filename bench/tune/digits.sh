#!/usr/bin/env bash
# The real objective: the digits MLP (lr, weight decay, width, dropout), 30
# trials: keel tune without pruning, keel tune with ASHA pruning, and Optuna
# 3.1 TPE driving the same `keel train` runs. Best val_accuracy and wall time.
set -eu
cd "$(dirname "$0")/../.."
KEEL=${KEEL:-$PWD/build/keel} TRIALS=${TRIALS:-30} SEED=${SEED:-0}
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-tune-digits-XXXXXX")
cp bench/tune/digits_spec.yaml bench/tune/digits_space.yaml "$work/"
/usr/bin/python3 examples/digits/prepare.py "$work/data" > /dev/null
cd "$work"
export KEEL_TRACKING="$work/runs"
for mode in none asha; do
  t0=$(date +%s.%N)
  "$KEEL" tune digits_spec.yaml --space digits_space.yaml --trials "$TRIALS" --seed "$SEED" --pruner $mode \
    --study "digits-$mode" --json 2> "$work/tune-$mode.log" > "$work/tune-$mode.json"
  /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({'sampler':'keel-tpe','pruner':sys.argv[2],'best':d['best']['value'],'pruned':d['pruned'],'seconds':d['seconds']}))" "$work/tune-$mode.json" $mode
done
/usr/bin/python3 "$OLDPWD/bench/tune/digits_optuna.py" "$KEEL" "$work" "$TRIALS" "$SEED"
rm -rf "$work"
