#!/usr/bin/env bash
# bench/serve/ab.sh: A/B rounds of keel serve configurations on the MLP bench
# (the request and model of run.sh), interleaved A, B, A, B, ... on one
# machine, each round its own wrk run; prints one line per run and the
# medians (req/s, p50, p99, server CPU µs/request, mean batch rows).
# Usage: bench/serve/ab.sh [SECONDS] [CONNECTIONS] [ROUNDS]
# env: A_KEEL/B_KEEL (binaries, default build/keel), A_CFG/B_CFG (config.yaml
# text, default: max_batch_size 64, max_queue_delay_us 300; `none`: no config.yaml,
# the server's defaults), A_ARGS/B_ARGS (extra `keel serve` flags, default
# --workers 2; `none`: no flags), A_LOG/B_LOG (1: access log on, written to the
# server's stderr file; default off: --no-access-log), A_ENV/B_ENV (env for
# the server), WRK_THREADS (wrk threads, default 1).
set -eu
wt=${WRK_THREADS:-1}  # wrk threads (one drives 16 connections; a second competes with the server for the 2 cores)
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
dur=${1:-6}; conns=${2:-16}; rounds=${3:-3}
A_KEEL=${A_KEEL:-$root/build/keel}; B_KEEL=${B_KEEL:-$root/build/keel}
def=$'max_batch_size: 64\ndynamic_batching:\n  max_queue_delay_us: 300\n'
A_CFG=${A_CFG:-$def}; B_CFG=${B_CFG:-$def}
A_ARGS=${A_ARGS:---workers 2}; B_ARGS=${B_ARGS:---workers 2}
[ "$A_ARGS" = none ] && A_ARGS=; [ "$B_ARGS" = none ] && B_ARGS=
A_ENV=${A_ENV:-}; B_ENV=${B_ENV:-}
A_LOG=${A_LOG:-0}; B_LOG=${B_LOG:-0}
PY=/usr/bin/python3
w=$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-ab-XXXXXX"); pids=
trap 'for p in $pids; do kill $p 2>/dev/null; done; rm -rf "$w"' EXIT
KEEL_SRC=$root $PY "$here/mlp_setup.py" "$w" "$w/A" "$w/B"
[ "$A_CFG" = none ] || printf '%s' "$A_CFG" > "$w/A/mlp/config.yaml"
[ "$B_CFG" = none ] || printf '%s' "$B_CFG" > "$w/B/mlp/config.yaml"
export BODY_FILE="$w/body.json"
start() { # side binary args env log
  local nolog=--no-access-log; [ "$5" = 1 ] && nolog=
  env $4 "$2" serve "$w/$1" --port 0 $3 $nolog > "$w/$1.out" 2> "$w/$1.err" &
  eval "pid_$1=$!"; pids="$pids $!"
  for i in $(seq 150); do grep -q listening "$w/$1.out" 2>/dev/null && break; sleep 0.1; done
  eval "port_$1=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$w/$1.out")"
}
start A "$A_KEEL" "$A_ARGS" "$A_ENV" "$A_LOG"; start B "$B_KEEL" "$B_ARGS" "$B_ENV" "$B_LOG"
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
batch() { curl -s "http://127.0.0.1:$1/metrics" | awk '/^keel_inference_batch_size_(sum|count)\{model="mlp",version="[^"]*"\}/ {v[$1 ~ /sum/]+=$2} END {printf "%s %s", v[1]+0, v[0]+0}'; }
hz=$(getconf CLK_TCK)
for s in A B; do eval "p=\$port_$s"; wrk -t"$wt" -c"$conns" -d1s -s "$here/post.lua" "http://127.0.0.1:$p/v2/models/mlp/infer" > /dev/null; done
: > "$w/rows"
for r in $(seq "$rounds"); do
  for s in A B; do
    eval "p=\$port_$s; pid=\$pid_$s"
    c0=$(cpu "$pid"); b0=$(batch "$p")
    wrk -t"$wt" -c"$conns" -d"${dur}s" --latency -s "$here/post.lua" "http://127.0.0.1:$p/v2/models/mlp/infer" > "$w/wrk"
    c1=$(cpu "$pid"); b1=$(batch "$p")
    awk -v s="$s" -v c0="$c0" -v c1="$c1" -v hz="$hz" -v b0="$b0" -v b1="$b1" -v la="$(cut -d' ' -f1 /proc/loadavg)" '
      function ms(x) { if (x ~ /us$/) return x/1000; if (x ~ /ms$/) return x+0; if (x ~ /s$/) return x*1000; return x }
      /requests in/ {n=$1} /^Requests\/sec/ {rps=$2} $1=="50%" {p50=ms($2)} $1=="99%" {p99=ms($2)} /Non-2xx|Socket errors/ {err=err $0}
      END {split(b0, x, " "); split(b1, y, " "); mb = (y[2]-x[2]) ? (y[1]-x[1])/(y[2]-x[2]) : 0
           printf "%s %.0f %.3f %.3f %.1f %.2f %s%s\n", s, rps, p50, p99, (c1-c0)/hz*1e6/n, mb, la, err ? " ERR:" err : ""}' "$w/wrk" | tee -a "$w/rows"
  done
done
echo "medians (side req/s p50_ms p99_ms cpu_us/req batch):"
for s in A B; do
  awk -v s="$s" '$1==s' "$w/rows" | sort -k2,2n | awk '{a[NR]=$0} END {split(a[int((NR+1)/2)], m, " "); printf "%s rps %s ", m[1], m[2]}'
  for k in 3 4 5 6; do awk -v s="$s" -v k="$k" '$1==s {print $k}' "$w/rows" | sort -n | awk '{a[NR]=$1} END {printf "%s ", a[int((NR+1)/2)]}'; done
  echo
done
med() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ra=$(awk '$1=="A" {print $2}' "$w/rows" | med); rb=$(awk '$1=="B" {print $2}' "$w/rows" | med)
# per round: B's req/s over the A run just before it (the machine drifts between rounds)
rr=$(awk '$1=="A" {a=$2} $1=="B" && a {printf "%.3f\n", $2/a}' "$w/rows" | med)
echo "ratio B/A req/s: medians $(awk -v a="$ra" -v b="$rb" 'BEGIN{printf "%.3f", b/a}'), median of per-round ratios $rr"
