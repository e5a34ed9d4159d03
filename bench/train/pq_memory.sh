#!/usr/bin/env bash
# bench/train/pq_memory.sh: per-rank resident memory of keel train on a Parquet
# dataset of many row groups (issue 27, "Parquet datasets sharded by row
# group"): ROWS rows x 32 float64 features in row groups of RG rows, a
# 90/10 fraction split; 1 and 2 ranks; each rank's peak RSS (GNU time's %M)
# and, with KEEL_BEFORE=an earlier keel binary (one that reads the training
# rows whole), the same runs with it. Memory does not depend on the machine's
# load, so one run of each suffices. Writes
# bench/results/train-pq-rowgroup-memory.json when KEEL_BEFORE is given.
# Usage: KEEL_BEFORE=/path/to/old/keel bench/train/pq_memory.sh   (ROWS=200000 RG=4096)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
KEEL=${KEEL:-$root/build/keel}
KEEL_BEFORE=${KEEL_BEFORE:-}
W=${W:-$root/build/bench-pq-memory}
ROWS=${ROWS:-200000}; RG=${RG:-4096}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mkdir -p "$W"
if [ ! -d "$W/ds" ]; then
  /usr/bin/python3 - "$W" "$ROWS" <<'PY'
import numpy as np, sys
w, n = sys.argv[1], int(sys.argv[2]); r = np.random.RandomState(0)
x = r.randn(n, 32); y = (x[:, 0] + x[:, 1] > 0).astype(int)
np.savetxt(w + "/d.csv", np.column_stack([x, y]), delimiter=",", fmt=["%.6f"] * 32 + ["%d"],
           header=",".join(["f%d" % i for i in range(32)] + ["y"]), comments="")
with open(w + "/schema.yaml", "w") as f:
    f.write("name: d\ncolumns:\n" + "".join("  - {name: f%d, type: float64}\n" % i for i in range(32)) +
            "  - {name: y, type: int64}\n")
PY
  "$KEEL" ingest "$W/d.csv" --schema "$W/schema.yaml" --out "$W/ds" --row-group-rows "$RG" > /dev/null
fi
printf '%s\n' "seed: 1" "input: {shape: [32]}" "layers: [{type: linear, out: 64}, {type: relu}, {type: linear, out: 2}]" \
  "optimizer: {type: adamw, lr: 0.001}" "train: {epochs: 1, batch_size: 256}" \
  "data: {dataset: $W/ds, label: y, split: {train: 0.9, val: 0.1}}" > "$W/spec.yaml"
rss() { # binary ranks -> the ranks' peak RSS in MiB, space-separated
  local k=$1 n=$2 cmd=("$1" train "$W/spec.yaml" --out "$W/o$n" --quiet --no-track --threads 1 --max-steps 100)
  if [ "$n" = 1 ]; then /usr/bin/time -f "maxrss_kib %M" "${cmd[@]}" 2>&1 >/dev/null
  else mpirun --oversubscribe --bind-to none -np "$n" /usr/bin/time -f "maxrss_kib %M" "${cmd[@]}" 2>&1 >/dev/null; fi |
    sed -n 's/^maxrss_kib \([0-9]*\)$/\1/p' | awk '{printf "%s%.1f", (NR > 1 ? " " : ""), $1 / 1024}'
}
echo "dataset: $ROWS rows x 32 float64 in row groups of $RG ($(du -sh "$W/ds" | cut -f1) on disk)"
for n in 1 2; do
  after=$(rss "$KEEL" $n); echo "keel $n rank(s): peak RSS per rank (MiB): $after"
  eval "after_$n=\"$after\""
  if [ -n "$KEEL_BEFORE" ]; then
    before=$(rss "$KEEL_BEFORE" $n); echo "before $n rank(s): peak RSS per rank (MiB): $before"
    eval "before_$n=\"$before\""
  fi
done
[ -n "$KEEL_BEFORE" ] || exit 0
/usr/bin/python3 - "$root/bench/results/train-pq-rowgroup-memory.json" "$ROWS" "$RG" "$before_2" "$after_2" "$before_1" "$after_1" <<'PY'
import json, os, sys, datetime
p, rows, rg, b2, a2, b1, a1 = sys.argv[1:8]
b2, a2 = max(map(float, b2.split())), max(map(float, a2.split()))
r = {"id": "train-pq-rowgroup-memory", "order": 306, "area": "train-mpi",
     "what": "keel train on Parquet (%s rows x 32 float64, row groups of %s), 2 ranks: peak RSS per rank, whole "
             "arrays / by row group" % (rows, rg),
     "peer": "keel reading the training rows whole", "ratio": round(b2 / a2, 2), "unit": "× less memory per rank",
     "machine": "%d-core, memory does not depend on the load" % os.cpu_count(), "date": str(datetime.date.today()),
     "command": "KEEL_BEFORE=... bash bench/train/pq_memory.sh",
     "source": "bench/train/pq_memory.sh: peak RSS per rank at 2 ranks %.1f MiB before, %.1f MiB after; "
               "1 rank %s before, %s after" % (b2, a2, b1, a1)}
with open(p + ".tmp", "w") as f:
    json.dump(r, f, indent=2, ensure_ascii=False); f.write("\n")
os.replace(p + ".tmp", p)
PY
