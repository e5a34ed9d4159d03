#!/usr/bin/env bash
# Benchmark: the cost of `keel ingest --on-error recover` over the default
# `--on-error reject`, and of the CSV reader's general path (a dialect option
# beyond RFC 4180: here `trim: true`) over its fast path, on the 2M-row click
# log (clean, so every mode loads the same rows). Runs interleaved; prints
# the medians of wall and CPU (user + sys: the fair figure on a loaded
# machine) and the ratios to reject, all measured in this run.
# Env: THREADS (default 2), RUNS (default 5), ROWS (default 2000000).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
KEEL="$root/$BUILD/keel"
THREADS=${THREADS:-2}
RUNS=${RUNS:-5}
ROWS=${ROWS:-2000000}
W="$root/$BUILD/bench-ingest"
mkdir -p "$W"
[ -x "$KEEL" ] || { echo "build keel first (make)"; exit 1; }
csv="$W/clicks-$ROWS.csv"
[ -f "$csv" ] || "$KEEL" data gen-clicks "$csv" --rows "$ROWS" --seed 42
sed 's/^name: clicks$/name: clicks\ndialect: {trim: true}/' bench/ingest/clicks.yaml > "$W/clicks-trim.yaml"
run() { # mode schema on-error -> "wall cpu" seconds
  rm -rf "$W/ds-$1"
  /usr/bin/time -f "%e %U %S" -o "$W/time-$1.txt" "$KEEL" --threads "$THREADS" ingest "$csv" --schema "$2" --out "$W/ds-$1" --on-error "$3" > /dev/null
  read -r w u s < "$W/time-$1.txt"
  echo "$w $(echo "$u + $s" | bc -l)"
}
declare -A wall cpu
modes=(reject recover general)
for i in $(seq "$RUNS"); do
  line="run $i:"
  for m in "${modes[@]}"; do
    case $m in
      reject) t=$(run reject bench/ingest/clicks.yaml reject) ;;
      recover) t=$(run recover bench/ingest/clicks.yaml recover) ;;
      general) t=$(run general "$W/clicks-trim.yaml" reject) ;;
    esac
    wall[$m]="${wall[$m]:-} ${t% *}"; cpu[$m]="${cpu[$m]:-} ${t#* }"
    line="$line $m ${t% *} s (cpu ${t#* })"
  done
  echo "$line"
done
med() { printf '%s\n' $@ | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo
echo "| date | machine | rows | threads | reject wall / CPU (median s) | recover wall / CPU | recover / reject (wall, CPU) | general path (trim) wall / CPU | general / reject (wall, CPU) |"
echo "|---|---|---|---|---|---|---|---|---|"
aw=$(med ${wall[reject]}); ac=$(med ${cpu[reject]}); bw=$(med ${wall[recover]}); bc_=$(med ${cpu[recover]}); cw=$(med ${wall[general]}); cc=$(med ${cpu[general]})
printf '| %s | %s | %s | %s | %.3f / %.3f | %.3f / %.3f | %.3f×, %.3f× | %.3f / %.3f | %.3f×, %.3f× |\n' "$(date -u +%F)" "$(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)" \
  "$ROWS" "$THREADS" "$aw" "$ac" "$bw" "$bc_" "$(echo "$bw / $aw" | bc -l)" "$(echo "$bc_ / $ac" | bc -l)" "$cw" "$cc" \
  "$(echo "$cw / $aw" | bc -l)" "$(echo "$cc / $ac" | bc -l)"
