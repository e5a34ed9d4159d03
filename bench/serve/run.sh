#!/usr/bin/env bash
# bench/serve: keel serve vs FastAPI + uvicorn + PyTorch serving the same
# 784-512-512-10 MLP over the same KServe v2 JSON request, measured with wrk
# at 16 connections in one run. Prints a markdown table row per server.
# Then keel's defaults against this tuned configuration: `keel serve REPO`
# with no config.yaml, no flags and the access log on, against the tuned one,
# in ROUNDS interleaved wrk runs each (bench/serve/ab.sh): medians and ratio.
# Usage: bench/serve/run.sh [SECONDS] [CONNECTIONS]   (env KEEL, WORKERS, HTTP_THREADS (default: cores), DELAY_US, WRK_THREADS (default 1),
#   FASTAPI_WORKERS (uvicorn worker processes, default 1), ROUNDS (default vs tuned rounds, default 5; 0 = skip))
set -eu
wt=${WRK_THREADS:-1}  # wrk threads (one drives 16 connections; a second competes with the server for the 2 cores)
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
KEEL=${KEEL:-$root/build/keel}; PY=/usr/bin/python3
dur=${1:-10}; conns=${2:-16}
for t in wrk "$KEEL"; do command -v "$t" >/dev/null || { echo "bench/serve: $t missing (make deps / make)"; exit 1; }; done
w=$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-serve-XXXXXX"); trap 'kill $kp $fp 2>/dev/null; rm -rf "$w"' EXIT
kp=; fp=
KEEL_SRC=$root $PY "$here/mlp_setup.py" "$w" "$w/repo"
printf 'max_batch_size: 64\ndynamic_batching:\n  max_queue_delay_us: %d\n' "${DELAY_US:-500}" > "$w/repo/mlp/config.yaml"
export BODY_FILE="$w/body.json"
workers=${WORKERS:-$(nproc)}
"$KEEL" serve "$w/repo" --port 0 --workers "$workers" --http-threads "${HTTP_THREADS:-$(nproc)}" --no-access-log > "$w/keel.out" 2> "$w/keel.err" & kp=$!
for i in $(seq 100); do grep -q listening "$w/keel.out" 2>/dev/null && break; sleep 0.1; done
kport=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$w/keel.out")
fport=$((kport + 1))
$PY "$here/fastapi_server.py" "$w/repo/mlp/1/model.onnx" "$fport" "${FASTAPI_WORKERS:-1}" > "$w/fa.out" 2>&1 & fp=$!
for i in $(seq 200); do curl -s -o /dev/null -X POST --data-binary @"$BODY_FILE" "http://127.0.0.1:$fport/v2/models/mlp/infer" && break; sleep 0.1; done
# same answer from both
curl -s -X POST --data-binary @"$BODY_FILE" "http://127.0.0.1:$kport/v2/models/mlp/infer" > "$w/k.json"
curl -s -X POST --data-binary @"$BODY_FILE" "http://127.0.0.1:$fport/v2/models/mlp/infer" > "$w/f.json"
$PY -c "
import json,sys; a=json.load(open('$w/k.json'))['outputs'][0]['data']; b=json.load(open('$w/f.json'))['outputs'][0]['data']
d=max(abs(x-y) for x,y in zip(a,b)); print('max |keel - torch| = %.2g' % d); sys.exit(d > 1e-3)"
cpu() { # utime + stime in clock ticks of a process and its children (uvicorn's workers)
  local t=0 p
  for p in $1 $(pgrep -P "$1"); do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done
  echo $t
}
run() { # name port pid
  local c0=$(cpu "$3")
  /usr/bin/time -f "%U %S" -o "$w/$1.time" \
    wrk -t"$wt" -c"$conns" -d"${dur}s" --latency -s "$here/post.lua" "http://127.0.0.1:$2/v2/models/mlp/infer" > "$w/$1.wrk"
  local c1=$(cpu "$3")
  rps=$(awk '/^Requests\/sec/ {print $2}' "$w/$1.wrk")
  nreq=$(awk '/requests in/ {print $1}' "$w/$1.wrk")
  cpu_us=$(awk -v a="$c0" -v b="$c1" -v n="$nreq" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.0f", (b-a)/hz*1e6/n}')
  p50=$(awk '$1=="50%" {print $2}' "$w/$1.wrk"); p99=$(awk '$1=="99%" {print $2}' "$w/$1.wrk")
  errs=$(grep -E "Non-2xx|Socket errors" "$w/$1.wrk" | tr '\n' ' ' || true)
  # the client's share: wrk's CPU time against the server's over the run
  wrk_share=$(awk -v a="$c0" -v b="$c1" -v hz="$(getconf CLK_TCK)" '{w=$1+$2} END {s=(b-a)/hz; printf "%.0f%%", 100*w/(w+s)}' "$w/$1.time")
  echo "$1 $rps $p50 $p99 $cpu_us $wrk_share $errs"
}
wrk -t"$wt" -c"$conns" -d2s -s "$here/post.lua" "http://127.0.0.1:$kport/v2/models/mlp/infer" > /dev/null  # warm
k=$(run keel "$kport" "$kp"); f=$(run fastapi "$fport" "$fp")
echo "| server | req/s | p50 | p99 | server CPU µs/request | wrk's share of wrk+server CPU | errors |"; echo "|---|---|---|---|---|---|---|"
for l in "$k" "$f"; do set -- $l; n=$1 r=$2 a=$3 b=$4 c=$5 ws=$6; shift 6; echo "| $n | $r | $a | $b | $c | $ws | ${*:-none} |"; done
curl -s "http://127.0.0.1:$kport/metrics" | awk '/^keel_inference_batch_size_(sum|count)\{model="mlp",version="[^"]*"\}/ {v[$1 ~ /sum/]+=$2}
  END {if (v[0]) printf "keel mean batch size: %.2f rows\n", v[1]/v[0]}'
kr=$(echo "$k" | awk '{print $2}'); fr=$(echo "$f" | awk '{print $2}')
echo "ratio keel/fastapi req/s: $(awk -v a="$kr" -v b="$fr" 'BEGIN{printf "%.1f", a/b}')x (load average $(cut -d' ' -f1-3 /proc/loadavg))"

# keel's defaults vs the tuned configuration above, interleaved rounds
rounds=${ROUNDS:-5}
[ "$rounds" -gt 0 ] || exit 0
tuned_cfg=$(cat "$w/repo/mlp/config.yaml")$'\n'
A_KEEL=$KEEL B_KEEL=$KEEL A_CFG=$tuned_cfg A_ARGS="--workers $workers --http-threads ${HTTP_THREADS:-$(nproc)}" A_LOG=0 \
  B_CFG=none B_ARGS=none B_LOG=1 WRK_THREADS=$wt bash "$here/ab.sh" "$dur" "$conns" "$rounds" > "$w/ab.out"
echo
echo "| keel configuration (median of $rounds runs) | req/s | p50 ms | p99 ms | server CPU µs/request | mean batch rows |"
echo "|---|---|---|---|---|---|"
awk '$2=="rps" {n = $1=="A" ? "tuned (config.yaml above, --workers/--http-threads, --no-access-log)" : "default (no config.yaml, no flags, access log on)";
  printf "| %s | %s | %s | %s | %s | %s |\n", n, $3, $4, $5, $6, $7}' "$w/ab.out"
awk '/^ratio/ {sub(/^ratio B\/A req\/s: /, ""); print "default/tuned req/s: " $0 " (load average '"$(cut -d' ' -f1-3 /proc/loadavg)"')"}' "$w/ab.out"
