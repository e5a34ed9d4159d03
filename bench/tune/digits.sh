#!/usr/bin/env bash
# The real objective: the digits MLP (lr, weight decay, width, dropout), 30
# trials per study, for each seed in SEEDS: keel tune without pruning, with
# the median pruner and with ASHA, and Optuna 3.1 TPE driving the same keel
# training (`keel train --set ... --json`, one process per trial). Objective
# on both sides: the best val_accuracy over the trial's epochs (fixed split,
# spec seed 1). Prints one JSON line per study and a summary: median best per
# sampler, and keel's summed training time (wall and CPU) with pruning vs
# without (same run). keel tune runs its trials in-process (--parallel 1).
set -eu
cd "$(dirname "$0")/../.."
KEEL=${KEEL:-$PWD/build/keel} TRIALS=${TRIALS:-30} SEEDS=${SEEDS:-"0 1 2 3 4"}
src=$PWD
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-tune-digits-XXXXXX")
cp bench/tune/digits_spec.yaml bench/tune/digits_space.yaml "$work/"
/usr/bin/python3 examples/digits/prepare.py "$work/data" > /dev/null
cd "$work"
export KEEL_TRACKING="$work/runs"
out="$work/digits.jsonl"
for seed in $SEEDS; do
  for mode in none median asha; do
    "$KEEL" tune digits_spec.yaml --space digits_space.yaml --trials "$TRIALS" --seed "$seed" --pruner $mode \
      --study "digits-$mode-$seed" --out "$work/t-$mode-$seed" --json 2> "$work/tune-$mode-$seed.log" > "$work/tune.json"
    /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({'sampler':'keel-tpe','pruner':sys.argv[2],'seed':int(sys.argv[3]),'best':d['best']['value'],'pruned':d['pruned'],'train_seconds':d['train_seconds'],'train_cpu_seconds':d['train_cpu_seconds'],'seconds':d['seconds']}))" \
      "$work/tune.json" $mode "$seed" | tee -a "$out"
    rm -rf "$work/t-$mode-$seed"
  done
  /usr/bin/python3 "$src/bench/tune/digits_optuna.py" "$KEEL" "$work" "$TRIALS" "$seed" | tee -a "$out"
  rm -rf "$work/optuna"
done
/usr/bin/python3 - "$out" "$TRIALS" <<'P'
import json, statistics as S, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def sel(s, p=None): return [r for r in rows if r["sampler"] == s and (p is None or r.get("pruner") == p)]
seeds = sorted({r["seed"] for r in rows})
print("| seed | keel, no pruning | keel, median | keel, ASHA | Optuna TPE |")
print("|---|---|---|---|---|")
for s in seeds:
    g = lambda rs: next((r["best"] for r in rs if r["seed"] == s), float("nan"))
    print("| %d | %.5f | %.5f | %.5f | %.5f |" % (s, g(sel("keel-tpe", "none")), g(sel("keel-tpe", "median")), g(sel("keel-tpe", "asha")), g(sel("optuna-tpe"))))
med = lambda rs, k="best": S.median(r[k] for r in rs)
print("| median | %.5f | %.5f | %.5f | %.5f |" % (med(sel("keel-tpe", "none")), med(sel("keel-tpe", "median")), med(sel("keel-tpe", "asha")), med(sel("optuna-tpe"))))
t0 = sum(r["train_seconds"] for r in sel("keel-tpe", "none"))
c0 = sum(r["train_cpu_seconds"] for r in sel("keel-tpe", "none"))
for p in ("median", "asha"):
    t = sum(r["train_seconds"] for r in sel("keel-tpe", p))
    c = sum(r["train_cpu_seconds"] for r in sel("keel-tpe", p))
    print("keel %s: training time %.1f s wall / %.1f s CPU vs %.1f / %.1f without pruning (%.2fx / %.2fx less), %d of %d trials pruned, median best %.5f vs %.5f (%+.2f %%)" % (
        p, t, c, t0, c0, t0 / t, c0 / c, sum(r["pruned"] for r in sel("keel-tpe", p)), len(sel("keel-tpe", p)) * int(sys.argv[2]),
        med(sel("keel-tpe", p)), med(sel("keel-tpe", "none")), 100 * (med(sel("keel-tpe", p)) / med(sel("keel-tpe", "none")) - 1)))
P
rm -rf "$work"
