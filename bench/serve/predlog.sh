#!/usr/bin/env bash
# bench/serve/predlog.sh: the cost of the prediction log (keel serve
# --log-predictions DIR, docs/monitoring.md "Prediction log") on serving.
# The clicks model of tests/integration/serve_predlog.py (2 raw inputs, 9
# feature slots, 1 output; monitored, the default) served twice from the same
# binary: A without the log, B with --log-predictions; :predict with 8
# records per request, interleaved A, B, A, B rounds of wrk on one machine.
# Prints one line per run, the medians (req/s, p50, p99 in ms, server CPU per
# request including the log's writer thread) and B/A ratios, then what B
# logged and dropped (keel_prediction_log_*).
# Usage: bench/serve/predlog.sh [SECONDS] [CONNECTIONS] [ROUNDS]
# env: B_LOG=0 runs B without the log too (an A/A control of the setup).
set -eu
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
dur=${1:-5}; conns=${2:-16}; rounds=${3:-5}
K=${KEEL:-$root/build/keel}
PY=/usr/bin/python3
w=$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-predlog-XXXXXX"); pids=
trap 'for p in $pids; do kill $p 2>/dev/null; done; rm -rf "$w"' EXIT
cd "$w"
. "$here/lib_clicks.sh"
clicks_ab
export BODY_FILE="$w/body.json"
ab_start A
if [ "${B_LOG:-1}" = 0 ]; then ab_start B; else ab_start B --log-predictions "$w/log"; fi
for s in A B; do eval "p=\$port_$s"; wrk -t1 -c"$conns" -d1s -s "$here/post.lua" "http://127.0.0.1:$p/v1/models/ctr:predict" > /dev/null; done
: > rows
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
for r in $(seq "$rounds"); do
  for s in A B; do
    eval "p=\$port_$s; pid=\$pid_$s"
    c0=$(cpu "$pid")
    wrk -t1 -c"$conns" -d"${dur}s" --latency -s "$here/post.lua" "http://127.0.0.1:$p/v1/models/ctr:predict" > wrk.out
    c1=$(cpu "$pid")
    awk -v s="$s" -v c0="$c0" -v c1="$c1" -v hz="$hz" '
      function ms(x) { if (x ~ /us$/) return x/1000; if (x ~ /ms$/) return x+0; if (x ~ /s$/) return x*1000; return x }
      /requests in/ {n=$1} /^Requests\/sec/ {rps=$2} $1=="50%" {p50=ms($2)} $1=="99%" {p99=ms($2)} /Non-2xx|Socket errors/ {err=err $0}
      END {printf "%s %.0f %.3f %.3f %.2f%s\n", s, rps, p50, p99, (c1-c0)/hz*1e6/n, err ? " ERR:" err : ""}' wrk.out | tee -a rows
  done
done
med() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for k in 2 3 4 5; do
  eval "a$k=$(awk -v k=$k '$1=="A" {print $k}' rows | med); b$k=$(awk -v k=$k '$1=="B" {print $k}' rows | med)"
done
echo "rows: side req/s p50_ms p99_ms server_cpu_us/request"
echo "medians: off (A) $a2 req/s, p50 $a3 ms, p99 $a4 ms, $a5 us CPU/request; logged (B) $b2 req/s, p50 $b3 ms, p99 $b4 ms, $b5 us CPU/request"
rr=$(awk '$1=="A" {a=$2} $1=="B" && a {printf "%.3f\n", $2/a}' rows | med)
echo "logged/off req/s: medians $(awk -v a="$a2" -v b="$b2" 'BEGIN{printf "%.3f", b/a}'), median of per-round ratios $rr"
echo "logged/off p99: medians $(awk -v a="$a4" -v b="$b4" 'BEGIN{printf "%.3f", b/a}')"
echo "logged/off server CPU per request: medians $(awk -v a="$a5" -v b="$b5" 'BEGIN{printf "%.3f", b/a}')"
curl -s "http://127.0.0.1:$port_B/metrics" | grep '^keel_prediction_log_' || true
