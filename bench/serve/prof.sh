#!/usr/bin/env bash
# bench/serve/prof.sh: perf profile of `keel serve` alone under the MLP bench
# load of run.sh (same model, config and request; wrk -tWRK_THREADS -cCONNS). Prints
# wrk's summary, the server CPU per request and perf's flat profile (self
# time per symbol, kernel included) and writes perf.data to OUTDIR.
# Usage: bench/serve/prof.sh [SECONDS] [CONNECTIONS] [OUTDIR]   (env KEEL, HTTP_THREADS, DELAY_US, PERF_ARGS, WRK_THREADS (default 1))
set -eu
wt=${WRK_THREADS:-1}  # wrk threads (one drives 16 connections; a second competes with the server for the 2 cores)
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
KEEL=${KEEL:-$root/build/keel}; PY=/usr/bin/python3
dur=${1:-8}; conns=${2:-16}; out=${3:-$(mktemp -d "${TMPDIR:-/tmp}/keel-prof-XXXXXX")}
mkdir -p "$out"
w=$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-prof-XXXXXX"); kp=
trap 'kill $kp 2>/dev/null; rm -rf "$w"' EXIT
KEEL_SRC=$root $PY "$here/mlp_setup.py" "$w" "$w/repo"
printf 'max_batch_size: 64\ndynamic_batching:\n  max_queue_delay_us: %d\n' "${DELAY_US:-500}" > "$w/repo/mlp/config.yaml"
export BODY_FILE="$w/body.json"
"$KEEL" serve "$w/repo" --port 0 --workers "$(nproc)" --http-threads "${HTTP_THREADS:-$(nproc)}" --no-access-log > "$w/keel.out" 2> "$w/keel.err" & kp=$!
for i in $(seq 100); do grep -q listening "$w/keel.out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$w/keel.out")
url="http://127.0.0.1:$port/v2/models/mlp/infer"
wrk -t"$wt" -c"$conns" -d2s -s "$here/post.lua" "$url" > /dev/null
c0=$(awk '{print $14 + $15}' "/proc/$kp/stat")
perf record ${PERF_ARGS:--g} -o "$out/perf.data" -p "$kp" -- sleep "$dur" 2> "$out/perf.err" &
pp=$!
wrk -t"$wt" -c"$conns" -d"${dur}s" --latency -s "$here/post.lua" "$url" > "$out/wrk.txt"
wait $pp || true
c1=$(awk '{print $14 + $15}' "/proc/$kp/stat")
n=$(awk '/requests in/ {print $1}' "$out/wrk.txt")
grep -E "Requests/sec|requests in|99%|50%" "$out/wrk.txt"
awk -v a="$c0" -v b="$c1" -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "server CPU %.1f us/request (perf running)\n", (b-a)/hz*1e6/n}'
curl -s "http://127.0.0.1:$port/metrics" | awk '/^keel_inference_batch_size_(sum|count)\{model="mlp",version="[^"]*"\}/ {v[$1 ~ /sum/]+=$2}
  END {if (v[0]) printf "mean batch size: %.2f rows\n", v[1]/v[0]}'
perf report -i "$out/perf.data" --no-children --sort symbol --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -${TOP:-60}
echo "perf.data in $out"
