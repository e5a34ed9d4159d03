#!/usr/bin/env bash
# bench/features/redis.sh: the online transform of one record (JSON parse
# included) with two window features, p50/p99 at a paced 2,000 records/s on
# loopback, reading the windows from Redis (redis://, one pipelined round trip
# per record) vs the SQLite store's online path (the histories in memory) in
# the same run: `keel features latency --rate RATE [--store redis://...]`,
# RUNS alternating runs of each, medians. Starts its own redis-server on a
# free port (no persistence) and stops it on every exit.
# Writes bench/results/features_redis.json (bench/README.md's table).
set -eu
cd "$(dirname "$0")/../.."
SRC=$PWD
KEEL=${KEEL:-$SRC/build/keel}
ROWS=${ROWS:-60000}
RECORDS=${RECORDS:-10000}
RATE=${RATE:-2000}
RUNS=${RUNS:-3}
W=${BENCH_DIR:-$SRC/build/bench-features-redis}
mkdir -p "$W"
cd "$W"
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$PORT" --save "" --appendonly no --bind 127.0.0.1 --dir "$W" --daemonize no > redis.log 2>&1 &
RPID=$!
trap 'kill $RPID 2>/dev/null; wait $RPID 2>/dev/null' EXIT
for i in $(seq 1 100); do redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.05; done
cat > two_windows.yaml <<'Y'
# two window features (bench/features/redis.sh) and two row features
features:
  - {name: price_z, transform: standardize, input: item_price, type: float64, fill: 0}
  - {name: hour, transform: datepart, input: ts, type: timestamp, part: hour}
  - {name: user_count, transform: window, agg: count, events: 100, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}}
  - {name: user_gap3, transform: window, agg: mean_interval, events: 3, unit: s, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}, empty: -1}
Y
DATA=clickgen:$ROWS:42
"$KEEL" features fit two_windows.yaml --data "$DATA" --out f.json > /dev/null
echo "rows: $ROWS, timed records: $RECORDS at $RATE/s, runs: $RUNS, load: $(cut -d' ' -f1-3 /proc/loadavg)"
: > runs.jsonl
for i in $(seq 1 "$RUNS"); do
  "$KEEL" features latency f.json --data "$DATA" --records "$RECORDS" --rate "$RATE" --json | tee -a runs.jsonl
  "$KEEL" features latency f.json --data "$DATA" --records "$RECORDS" --rate "$RATE" \
    --store "redis://127.0.0.1:$PORT/0?prefix=bench$i:&timeout_ms=2000" --json | tee -a runs.jsonl
done
/usr/bin/python3 - "$SRC" "$ROWS" "$RECORDS" "$RATE" <<'PY'
import json, os, statistics, sys, datetime
src, rows, records, rate = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
runs = [json.loads(l) for l in open("runs.jsonl")]
med = lambda store, k: statistics.median(r[k] for r in runs if r["store"] == store)
r99, m99, r50, m50 = med("redis", "p99_us"), med("memory", "p99_us"), med("redis", "p50_us"), med("memory", "p50_us")
c99, d99 = med("redis", "call_p99_us"), med("memory", "call_p99_us")
print("median p99 (from the slot): redis %.1f us, sqlite (in memory) %.1f us; p50: redis %.1f us, sqlite %.1f us; "
      "p99 of the call alone: redis %.1f us, sqlite %.1f us; redis/sqlite p99 %.2fx; goal <= 1000 us p99"
      % (r99, m99, r50, m50, c99, d99, r99 / m99))
load = open("/proc/loadavg").read().split()[0]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
rec = {
    "id": "features_redis", "order": 235, "area": "features",
    "what": "online transform_row with two window features, p99 at %s records/s on loopback, windows from Redis" % rate,
    "peer": "the SQLite store's online path (in memory), same run; goal Redis p99 <= 1 ms (issue 28)",
    "ratio": round(r99 / m99, 2),
    "unit": "x the SQLite store's p99 (Redis p99 %.0f us, p50 %.0f us, call alone p99 %.0f us; SQLite p99 %.0f us, p50 %.1f us; load average %s)"
            % (r99, r50, c99, m99, m50, load),
    "machine": "%d cores %s" % (os.cpu_count() or 0, cpu),
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
    "command": "bash bench/features/redis.sh",
    "source": "bench/features/redis.sh, %s rows, %s timed records, medians of runs" % (rows, records),
}
out = os.path.join(src, "bench", "results", "features_redis.json")
with open(out + ".tmp", "w") as f:
    f.write(json.dumps(rec, indent=2, ensure_ascii=False) + "\n")
os.replace(out + ".tmp", out)
print("wrote", out)
PY
