#!/usr/bin/env bash
# make quickstart: from nothing to a served model. `make quickstart` has
# already installed the missing Debian packages (make deps) and built keel;
# this script generates the example click log, runs
# examples/clicks/pipeline.yaml (ingest -> validate -> features -> train ->
# evaluate -> export -> register), then serves the new model on 127.0.0.1
# and prints two ready-to-paste curl commands. Ctrl-C stops the server.
#
# Environment:
#   KEEL_QUICKSTART_NO_SERVE=1   everything but the server (tests)
#   KEEL_QUICKSTART_ROWS=N       click log size (default 200000, ~1 minute here)
#   KEEL_QUICKSTART_PORT=P       server port (default 8000; 0 = any free port)
#   KEEL_QUICKSTART_DIR=DIR      where everything goes (default BUILD/quickstart)
set -u
BUILD=${1:-build}
KEEL="$BUILD/keel"
SRC=$(cd "$(dirname "$0")/.." && pwd)
DIR=${KEEL_QUICKSTART_DIR:-$BUILD/quickstart}
ROWS=${KEEL_QUICKSTART_ROWS:-200000}
PORT=${KEEL_QUICKSTART_PORT:-8000}
mkdir -p "$DIR" || exit 1
DIR=$(cd "$DIR" && pwd)
RUNS="$DIR/runs"
t0=$(date +%s)

echo "== 1. click log: $ROWS rows with a known signal (keel data gen-clicks)"
if [ ! -s "$DIR/clicks.csv" ] || [ "$(cat "$DIR/clicks.rows" 2>/dev/null)" != "$ROWS" ]; then
  "$KEEL" data gen-clicks "$DIR/clicks.csv" --rows "$ROWS" --seed 1 || exit 1
  echo "$ROWS" > "$DIR/clicks.rows"
else
  echo "   (reusing $DIR/clicks.csv)"
fi

echo "== 2. pipeline: keel pipeline run examples/clicks/pipeline.yaml"
"$KEEL" --tracking "$RUNS" pipeline run "$SRC/examples/clicks/pipeline.yaml" --out "$DIR/out" \
  --set "stages.ingest.source=$DIR/clicks.csv" || exit 1
OUT="$DIR/out"
REPO="$OUT/repo"

# one raw record, and the same record as the model's input vector (the
# features layer's online path, keel features transform) for the v2 call
REC='{"user_id": 42, "item_price": 19.99, "ts": "2023-11-03T20:15:00Z", "category": "beauty"}'
VEC=$(echo "$REC" | "$KEEL" features transform "$OUT/features/features.json" --store "$OUT/features/features.db") || exit 1
WIDTH=$(echo "$VEC" | tr -cd ',' | wc -c); WIDTH=$((WIDTH + 1))
echo "$REC" > "$DIR/record.json"

if [ "${KEEL_QUICKSTART_NO_SERVE:-0}" = 1 ]; then
  echo
  echo "quickstart (no server) done in $(( $(date +%s) - t0 )) s"
  echo "report:  $OUT/report.html"
  echo "serve:   $KEEL serve $REPO"
  echo "ui:      $KEEL ui --tracking $RUNS"
  exit 0
fi

echo "== 3. serving: keel serve $REPO"
LOG="$DIR/serve.log"
: > "$LOG"
"$KEEL" serve "$REPO" --host 127.0.0.1 --port "$PORT" >"$LOG" 2>&1 &
SPID=$!
stop() { kill -INT "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; echo; echo "keel serve stopped."; exit 0; }
trap stop INT TERM
URL=""
for _ in $(seq 1 300); do
  URL=$(grep -o 'listening on http://[0-9.:]*' "$LOG" | head -1 | sed 's/listening on //')
  [ -n "$URL" ] && break
  kill -0 "$SPID" 2>/dev/null || { echo "keel serve failed:"; cat "$LOG"; exit 1; }
  sleep 0.1
done
[ -n "$URL" ] || { echo "keel serve did not start:"; cat "$LOG"; kill "$SPID"; exit 1; }
for _ in $(seq 1 300); do
  curl -sf "$URL/v2/models/ctr/ready" >/dev/null 2>&1 && break
  sleep 0.1
done
cat > "$DIR/curl.sh" <<CURL
curl -s $URL/v1/models/ctr:predict -H 'Content-Type: application/json' -d '{"instances": [$REC]}'
curl -s $URL/v2/models/ctr/infer -H 'Content-Type: application/json' -d '{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, $WIDTH], "data": $VEC}]}'
CURL
echo
echo "keel serve is up at $URL (model ctr; log $LOG). Try:"
echo
echo "# raw record -> features (same code as training, with the user's window state) -> model (click logit):"
sed -n 1p "$DIR/curl.sh"
echo
echo "# KServe v2 tensor inference on the feature vector of the same record:"
sed -n 2p "$DIR/curl.sh"
echo
echo "report:  $OUT/report.html"
echo "ui:      $KEEL ui --tracking $RUNS   (then open http://127.0.0.1:5050)"
echo "ready in $(( $(date +%s) - t0 )) s. Ctrl-C stops the server."
wait "$SPID"
rc=$?
# Ctrl-C reaches the server too (same process group): when it has exited
# before bash ran the trap, this wait returns its status and stop() never runs
trap - INT TERM
echo
if [ "$rc" = 0 ]; then echo "keel serve stopped."; else echo "keel serve stopped (exit status $rc)."; fi
exit "$rc"
