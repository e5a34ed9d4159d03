#!/usr/bin/env bash
# Tuning benchmark: keel's TPE vs Optuna 3.1's TPE (and both random samplers)
# on the standard test functions, same budget (TRIALS, default 50) and seeds
# (SEEDS, default 10); median over seeds of the best value found.
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
TRIALS=${TRIALS:-50} SEEDS=${SEEDS:-10}
mkdir -p "$BUILD/bench"
gcc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/tune/tune_bench.c "$BUILD/libkeel.a" \
  $(pkg-config --libs libcrypto yaml-0.1 libcjson) -lm -pthread -o "$BUILD/bench/tune_bench"
out="$BUILD/bench/tune.jsonl"
{ "$BUILD/bench/tune_bench" tpe "$TRIALS" "$SEEDS"; "$BUILD/bench/tune_bench" random "$TRIALS" "$SEEDS";
  /usr/bin/python3 bench/tune/optuna_bench.py tpe "$TRIALS" "$SEEDS"; /usr/bin/python3 bench/tune/optuna_bench.py random "$TRIALS" "$SEEDS"; } > "$out"
/usr/bin/python3 - "$out" <<'P'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
res = {(r["function"], r["sampler"]): r["median_best"] for r in rows if "function" in r}
over = [r for r in rows if "overhead_cpu_ms" in r]
fns = sorted({f for f, _ in res}, key=lambda f: [r["function"] for r in rows if "function" in r].index(f))
print("| function | keel TPE | Optuna TPE | keel random | Optuna random | keel <= Optuna |")
print("|---|---|---|---|---|---|")
for f in fns:
    k, o = res.get((f, "keel-tpe")), res.get((f, "optuna-tpe"))
    print("| %s | %.4g | %.4g | %.4g | %.4g | %s |" % (f, k, o, res.get((f, "keel-random")), res.get((f, "optuna-random")), "yes" if k <= o else "NO"))
if over:
    print("sampler time per trial at 1000 trials: %.2f ms CPU (%.2f ms wall)" % (over[0]["overhead_cpu_ms"], over[0]["overhead_ms_per_trial_at_1000"]))
P
# the real objective (slower: 90 keel train runs)
if [ "${DIGITS:-1}" = 1 ]; then bash bench/tune/digits.sh; fi
# several workers on one study: 1 vs 3 `keel tune` processes (SQLite and PostgreSQL)
if [ "${DISTRIBUTED:-1}" = 1 ]; then bash bench/tune/distributed.sh; fi
