#!/usr/bin/env bash
# bench/serve/monitor.sh: the cost of monitoring (docs/monitoring.md) on the
# request path. The clicks model of tests/integration/serve_monitor.py (fit,
# apply, train on clickgen rows: 2 raw inputs, 9 feature slots, 1 output)
# served twice from the same binary: A with `monitor: false` in config.yaml,
# B monitored (profile.json, default windows); :predict with 8 records per
# request, interleaved A, B, A, B rounds of wrk on one machine. Prints one
# line per run, the medians (req/s, p50, p99 in ms) and B/A ratios
# (goal: monitoring costs <= 3 % of throughput and p99).
# Usage: bench/serve/monitor.sh [SECONDS] [CONNECTIONS] [ROUNDS]
# env: B_MONITOR=false makes B unmonitored too (an A/A control of the setup).
set -eu
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
dur=${1:-5}; conns=${2:-16}; rounds=${3:-5}
K=${KEEL:-$root/build/keel}
PY=/usr/bin/python3
w=$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-monitor-XXXXXX"); pids=
trap 'for p in $pids; do kill $p 2>/dev/null; done; rm -rf "$w"' EXIT
cd "$w"
. "$here/lib_clicks.sh"
clicks_ab
printf 'monitor: false\n' > A/ctr/config.yaml
printf 'monitor: %s\n' "${B_MONITOR:-true}" > B/ctr/config.yaml   # B_MONITOR=false: an A/A control run
export BODY_FILE="$w/body.json"
ab_start A; ab_start B
[ "${B_MONITOR:-true}" = false ] || curl -sf "http://127.0.0.1:$port_B/v2/models/ctr/monitor" | grep -q '"monitoring":true' || { echo "B is not monitored" >&2; exit 1; }
curl -sf "http://127.0.0.1:$port_A/v2/models/ctr/monitor" | grep -q '"monitoring":false' || { echo "A is monitored" >&2; exit 1; }
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
echo "medians: off (A) $a2 req/s, p50 $a3 ms, p99 $a4 ms, $a5 us CPU/request; monitored (B) $b2 req/s, p50 $b3 ms, p99 $b4 ms, $b5 us CPU/request"
rr=$(awk '$1=="A" {a=$2} $1=="B" && a {printf "%.3f\n", $2/a}' rows | med)
echo "monitored/off req/s: medians $(awk -v a="$a2" -v b="$b2" 'BEGIN{printf "%.3f", b/a}'), median of per-round ratios $rr"
echo "monitored/off p99: medians $(awk -v a="$a4" -v b="$b4" 'BEGIN{printf "%.3f", b/a}')"
echo "monitored/off server CPU per request: medians $(awk -v a="$a5" -v b="$b5" 'BEGIN{printf "%.3f", b/a}')"
curl -s "http://127.0.0.1:$port_B/metrics" | grep '^keel_monitor_memory_bytes'
