#!/usr/bin/env bash
# bench/serve overload: keel serve under overload with mixed priorities.
# Phase A: high priority alone (HIGH connections). Phase B: the same high
# traffic plus LOW connections of low-priority traffic (closed loop, far above
# what the server can run), level 2 limited to a queue of 16 and a 50 ms
# timeout so it is shed with 503s. Reports high-priority success and p99
# (B vs A), low-priority shed rate, allocator peak vs budget, and that the
# server is still alive. Usage: bench/serve/overload.sh [SECONDS] [HIGH] [LOW]
set -eu
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
KEEL=${KEEL:-$root/build/keel}; PY=/usr/bin/python3
dur=${1:-10}; high=${2:-4}; low=${3:-32}
w=$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-overload-XXXXXX"); kp=
trap 'kill $kp 2>/dev/null; rm -rf "$w"' EXIT
KEEL_SRC=$root $PY "$here/mlp_setup.py" "$w" "$w/repo" --id ''
cat > "$w/repo/mlp/config.yaml" <<'YAML'
max_batch_size: 32
dynamic_batching:
  max_queue_delay_us: 0
priority_levels: 2
default_priority: 2
queue_policy:
  1: {max_queue_size: 0}
  2: {max_queue_size: 16, default_timeout_us: 50000}
YAML
export BODY_FILE="$w/body.json"
"$KEEL" --memory-limit 1G serve "$w/repo" --port 0 --no-access-log > "$w/keel.out" 2> "$w/keel.err" & kp=$!
for i in $(seq 100); do grep -q listening "$w/keel.out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$w/keel.out"); url="http://127.0.0.1:$port/v2/models/mlp/infer"
stats() { # file -> "requests non2xx p50 p99 rps"
  awk '/requests in/ {n=$1} /Non-2xx/ {e=$NF} $1=="50%" {a=$2} $1=="99%" {b=$2} /^Requests\/sec/ {r=$2}
       END {printf "%s %s %s %s %s\n", n, e+0, a, b, r}' "$1"
}
PRIORITY=1 wrk -t1 -c"$high" -d2s -s "$here/prio.lua" "$url" > /dev/null
PRIORITY=1 wrk -t1 -c"$high" -d"${dur}s" --latency -s "$here/prio.lua" "$url" > "$w/a.wrk"
PRIORITY=1 wrk -t1 -c"$high" -d"${dur}s" --latency -s "$here/prio.lua" "$url" > "$w/bh.wrk" &
hp=$!
PRIORITY=2 wrk -t1 -c"$low" -d"${dur}s" --latency -s "$here/prio.lua" "$url" > "$w/bl.wrk"
wait $hp
read an ae ap50 ap99 ar < <(stats "$w/a.wrk")
read hn he hp50 hp99 hr < <(stats "$w/bh.wrk")
read ln le lp50 lp99 lr < <(stats "$w/bl.wrk")
alive=$(curl -s -o /dev/null -w "%{http_code}" "http://127.0.0.1:$port/v2/health/live" || true)
curl -s "http://127.0.0.1:$port/metrics" > "$w/metrics"
peak=$(awk '/^keel_memory_reserved_bytes/ {s+=$2} END {print s}' "$w/metrics")
echo "| phase | traffic | requests | non-2xx | p50 | p99 | req/s |"
echo "|---|---|---|---|---|---|---|"
echo "| A: high alone | $high conn, priority 1 | $an | $ae | $ap50 | $ap99 | $ar |"
echo "| B: overload | $high conn, priority 1 | $hn | $he | $hp50 | $hp99 | $hr |"
echo "| B: overload | $low conn, priority 2 | $ln | $le | $lp50 | $lp99 | $lr |"
$PY - "$an" "$ae" "$ap99" "$hn" "$he" "$hp99" "$ln" "$le" <<'PY'
import sys
def ms(s):
    return float(s[:-2]) if s.endswith("ms") else float(s[:-2]) / 1000 if s.endswith("us") else float(s[:-1]) * 1000
an, ae, ap, hn, he, hp, ln, le = sys.argv[1:]
print("high-priority success under overload: %.3f %%; p99 %.2f ms vs %.2f ms alone (%.1fx); low priority shed: %.1f %%"
      % (100 * (1 - int(he) / max(1, int(hn))), ms(hp), ms(ap), ms(hp) / ms(ap), 100 * int(le) / max(1, int(ln))))
PY
echo "server alive after overload: HTTP $alive; allocator reserved bytes: $peak (budget 1 GiB)"
