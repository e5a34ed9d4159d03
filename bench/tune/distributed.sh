#!/usr/bin/env bash
# Several workers on one study (issue 28 §3): wall time of a 30-trial study
# (the digits MLP, 3 epochs per trial, TPE, seed 0) run by 3 `keel tune`
# processes at once on one store vs by 1 (the peer, same run, same store
# engine), on the SQLite store and on a PostgreSQL server started as the tests
# do (tests/integration/lib_pg.sh; skipped when its binaries are missing).
# Every worker trains with --threads THREADS (default 1), so the comparison is
# the same per-process work; RUNS (default 3) interleaved rounds, medians.
# Also reports each study's best value (the 3-worker study must find as good a
# one). Writes bench/results/tune-distributed-sqlite.json (and -pg.json) and
# renders the table in bench/README.md.
set -eu
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-build}
KEEL="$ROOT/$BUILD/keel"
RUNS=${RUNS:-3} THREADS=${THREADS:-1} TRIALS=${TRIALS:-30}
W=$(mktemp -d "${TMPDIR:-/tmp}/keel-tune-dist-bench-XXXXXX")
. tests/integration/lib_pg.sh
trap 'rm -rf "$W"' EXIT
/usr/bin/python3 examples/digits/prepare.py "$W/data" > /dev/null
cat > "$W/spec.yaml" <<Y
seed: 1
input: {shape: [64]}
layers:
  - {type: linear, out: 64}
  - {type: relu}
  - {type: linear, out: 10}
loss: {type: cross_entropy}
optimizer: {type: adamw, lr: 0.003, weight_decay: 0.01}
train: {epochs: 3, batch_size: 64, val_fraction: 0.2}
data: {x: $W/data/x_train.npy, y: $W/data/y_train.npy}
Y
cat > "$W/space.yaml" <<'Y'
optimizer.lr: {type: float, low: 0.0003, high: 0.05, log: true}
layers.0.out: {type: int, low: 16, high: 128, step: 16}
optimizer.weight_decay: {type: float, low: 0.00001, high: 0.1, log: true}
Y
MACHINE="$(nproc)-core $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load $(cut -d' ' -f1 /proc/loadavg) at start"
median() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
now() { date +%s%N; }

# study STORE NAME WORKERS: prints "seconds best"
study() {
  local store=$1 name=$2 n=$3 t0 t1 w pids=()
  t0=$(now)
  for w in $(seq "$n"); do
    "$KEEL" --threads "$THREADS" --tracking "$store" tune "$W/spec.yaml" --space "$W/space.yaml" --trials "$TRIALS" \
      --study "$name" --out "$W/out-$name" --json > "$W/$name-$w.json" 2> "$W/$name-$w.err" &
    pids+=($!)
  done
  for w in "${pids[@]}"; do wait "$w" || { echo "worker failed: $(tail -q -n 3 "$W/$name"-*.err)" >&2; return 1; }; done
  t1=$(now)
  local best
  best=$(/usr/bin/python3 -c 'import json,sys; print(max(json.load(open(f))["best"]["value"] for f in sys.argv[1:]))' "$W/$name"-*.json)
  echo "$(((t1 - t0) / 1000000)) $best"
}

declare -A T1 T3 B1 B3
engines="sqlite"
if pg_available && pg_start; then
  engines="sqlite pg"
  MACHINE="$MACHINE, PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}')"
fi
trap 'pg_stop; rm -rf "$W"' EXIT # pg_start set its own
for r in $(seq "$RUNS"); do
  for eng in $engines; do
    if [ "$eng" = pg ]; then store=$(pg_newdb "bench_$r"); export KEEL_ARTIFACTS="$W/art"; mkdir -p "$W/art"
    else store="$W/runs-$r"; fi
    out1=$(study "$store" "one-$r" 1) && out3=$(study "$store" "three-$r" 3) || exit 1
    read -r s1 b1 <<< "$out1"
    read -r s3 b3 <<< "$out3"
    echo "$eng round $r: 1 worker ${s1} ms (best $b1), 3 workers ${s3} ms (best $b3)"
    T1[$eng]="${T1[$eng]:-} $s1"; T3[$eng]="${T3[$eng]:-} $s3"; B1[$eng]="${B1[$eng]:-} $b1"; B3[$eng]="${B3[$eng]:-} $b3"
  done
done
for eng in $engines; do
  m1=$(tr ' ' '\n' <<< "${T1[$eng]}" | grep . | median); m3=$(tr ' ' '\n' <<< "${T3[$eng]}" | grep . | median)
  b1=$(tr ' ' '\n' <<< "${B1[$eng]}" | grep . | median); b3=$(tr ' ' '\n' <<< "${B3[$eng]}" | grep . | median)
  echo "$eng: $TRIALS trials, 1 worker $m1 ms, 3 workers $m3 ms: 3/1 = $(awk -v a="$m3" -v b="$m1" 'BEGIN{printf "%.2f", a/b}'); best $b1 vs $b3"
  /usr/bin/python3 - "$ROOT" "$eng" "$MACHINE" "$m1" "$m3" "$b1" "$b3" "$TRIALS" "$THREADS" "$RUNS" <<'PY'
import datetime, json, os, sys
root, eng, machine, m1, m3, b1, b3, trials, threads, runs = sys.argv[1:]
name = {"sqlite": "SQLite store", "pg": "PostgreSQL store"}[eng]
r = {"id": "tune-distributed-" + eng, "order": 92 if eng == "sqlite" else 93, "area": "tune",
     "what": "%s trials of the digits MLP (3 epochs, TPE) on the %s: 3 `keel tune` workers on one study, %s thread each, wall" % (trials, name, threads),
     "peer": "1 worker, same run and store",
     "ratio": round(float(m3) / float(m1), 2),
     "unit": "× wall time (lower is better; %.1f s vs %.1f s, median of %s; best val_accuracy %.4f vs %.4f)" % (
         float(m3) / 1000, float(m1) / 1000, runs, float(b3), float(b1)),
     "machine": machine, "date": datetime.date.today().isoformat(),
     "command": "bash bench/tune/distributed.sh", "source": "bench/tune/distributed.sh"}
p = os.path.join(root, "bench", "results", r["id"] + ".json")
with open(p + ".tmp", "w", encoding="utf-8") as fh:
    json.dump(r, fh, indent=2, ensure_ascii=False)
    fh.write("\n")
os.replace(p + ".tmp", p)
print("wrote", p)
PY
done
/usr/bin/python3 tools/bench_table.py render
