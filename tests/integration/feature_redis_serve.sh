# The online store on Redis from the command line and from keel serve, against
# a real redis-server: materialize / transform / push with --store redis://
# give what the SQLite store gives; two `keel serve --feature-store redis://`
# replicas behind nginx answer the same prediction for the same record
# whichever serves it, and the same as a replica on the SQLite store that got
# the same events; POST /v2/models/M/events appends (a bad record is named and
# appends nothing); Redis stopped: 503 with a clear body in bounded time (or
# empty windows counted under on_store_error: empty), /v2/health/ready says
# so; Redis restarted: the replicas reconnect.
. "$KEEL_SRC/tests/integration/lib.sh"
. "$KEEL_SRC/tests/integration/lib_redis.sh"
redis_start || exit 0
cd "$T"
URL="$REDIS_URL?timeout_ms=2000" # generous: a loaded test machine (refused connections still fail at once)

"$KEEL" data gen-clicks clicks.csv --rows 3000 --seed 3 > /dev/null || { fail redis_gen "gen-clicks failed"; exit 0; }
cat > clicks.yaml <<'EOF'
name: clicks
columns:
  - {name: user_id, type: int64, nullable: false, min: 1}
  - {name: item_price, type: float64, min: 0, max_null_ratio: 0.05}
  - {name: ts, type: timestamp, timezone: UTC, nullable: false}
  - {name: category, type: category, nullable: false, values: [books, toys, home, sports, garden, beauty]}
  - {name: clicked, type: bool, nullable: false}
EOF
cat > spec.yaml <<'EOF'
label: {column: clicked, type: bool}
features:
  - {name: price_z, transform: standardize, input: item_price, type: float64, fill: 0}
  - {name: hour, transform: datepart, input: ts, type: timestamp, part: hour}
  - {name: user_count, transform: window, agg: count, events: 100, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}}
  - {name: cat_price3, transform: window, agg: mean, events: 3, within: 86400, entity: {column: category, type: string}, time: {column: ts, type: timestamp}, value: {column: item_price, type: float64, fill: 0}}
EOF
"$KEEL" ingest clicks.csv --schema clicks.yaml --out ds > /dev/null 2> ingest.err &&
  "$KEEL" features fit spec.yaml --data ds --out f.json > /dev/null 2> fit.err ||
  { fail redis_setup "$(cat ingest.err fit.err | head -c 400)"; exit 0; }

# ---- command line: materialize, transform, push on both stores ----
expect_rc redis_materialize 0 "$KEEL" features materialize f.json --data ds --store "$URL" --json
"$KEEL" features materialize f.json --data ds --store store.db > /dev/null
cat > rec.jsonl <<'EOF'
{"user_id": 5, "item_price": 12.5, "ts": "2030-01-01T10:00:00Z", "category": "books", "clicked": true}
{"user_id": 17, "item_price": 3.0, "ts": "2030-01-02T23:30:00Z", "category": "beauty", "clicked": false}
{"user_id": 99999, "item_price": 0.5, "ts": "2030-01-03T01:00:00Z", "category": "toys", "clicked": false}
EOF
"$KEEL" features transform f.json --store store.db < rec.jsonl > sql1.out 2> sql1.err
"$KEEL" features transform f.json --store "$URL" < rec.jsonl > redis1.out 2> redis1.err
[ -s sql1.out ] && cmp -s sql1.out redis1.out && pass redis_transform_equals_sqlite ||
  fail redis_transform_equals_sqlite "sqlite: $(head -c 300 sql1.out) $(head -c 200 sql1.err) redis: $(head -c 300 redis1.out) $(head -c 300 redis1.err)"

cat > ev.jsonl <<'EOF'
{"user_id": 5, "item_price": 40.0, "ts": "2029-12-31T09:00:00Z", "category": "books"}
{"user_id": 5, "item_price": 41.0, "ts": "2029-12-31T09:30:00Z", "category": "books"}
{"user_id": 17, "item_price": 7.0, "ts": "2030-01-02T20:00:00Z", "category": "beauty"}
EOF
expect_rc redis_push 0 "$KEEL" features push f.json --store "$URL" --json < ev.jsonl
grep -q '"events": 3' "$T/out" && pass redis_push_counts || fail redis_push_counts "$(cat "$T/out")"
"$KEEL" features push f.json --store store.db < ev.jsonl > /dev/null
"$KEEL" features transform f.json --store store.db < rec.jsonl > sql2.out
"$KEEL" features transform f.json --store "$URL" < rec.jsonl > redis2.out
cmp -s sql2.out redis2.out && ! cmp -s sql1.out sql2.out && pass redis_push_equals_sqlite ||
  fail redis_push_equals_sqlite "sqlite: $(cat sql2.out) redis: $(cat redis2.out)"
printf '\n%s\n' '{"item_price": 1.0, "ts": "2030-01-01T00:00:00Z", "category": "toys"}' > bad.jsonl
expect_rc redis_push_bad_line 1 "$KEEL" features push f.json --store "$URL" < bad.jsonl
grep -q "stdin:2" "$T/err" && grep -q "user_id" "$T/err" && pass redis_push_bad_line_named || fail redis_push_bad_line_named "$(cat "$T/err")"
expect_rc redis_bad_url 1 "$KEEL" features transform f.json --store "redis://127.0.0.1:notaport/0" < rec.jsonl
grep -q "port" "$T/err" && pass redis_bad_url_named || fail redis_bad_url_named "$(cat "$T/err")"

# ---- serve: two replicas on Redis behind nginx, one on SQLite ----
W=$($PYTHON -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["outputs"]))' f.json)
for r in repo repo_sql; do
  mkdir -p $r/ctr/1 $r/ctr_empty/1
  cp f.json $r/ctr/1/features.json
  cp f.json $r/ctr_empty/1/features.json
  printf 'on_store_error: empty\n' > $r/ctr_empty/config.yaml
done
cp store.db repo_sql/ctr/1/features.db
cp store.db repo_sql/ctr_empty/1/features.db
$PYTHON - "$W" <<'EOF' || { fail redis_serve_model "write_mlp failed"; exit 0; }
import os, shutil, sys
sys.path.insert(0, os.path.join(os.environ["KEEL_SRC"], "tests", "integration", "serve"))
from helpers import write_mlp
w = int(sys.argv[1])
for r in ("repo", "repo_sql"):
    for m in ("ctr", "ctr_empty"):
        write_mlp(os.path.join(r, m, "1", "model.onnx"), seed=4, sizes=(w, 8, 2))
EOF

SERVE_PIDS=
serve_start() { # NAME ARGS... : starts keel serve, sets PORT_NAME
  local name=$1; shift
  "$KEEL" serve "$@" --port 0 --workers 1 --http-threads 1 --probe-interval 1 > "serve-$name.out" 2> "serve-$name.err" &
  SERVE_PIDS="$SERVE_PIDS $!"
  local i
  for i in $(seq 1 200); do
    grep -q "listening on" "serve-$name.out" 2> /dev/null && break
    sleep 0.05
  done
  eval "PORT_$name=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "serve-$name.out")"
}
at_exit 'for p in $SERVE_PIDS; do kill $p 2>/dev/null; done; for p in $SERVE_PIDS; do wait $p 2>/dev/null; done'
serve_start a repo --feature-store "$URL"
serve_start b repo --feature-store "$URL"
serve_start s repo_sql
if [ -z "$PORT_a" ] || [ -z "$PORT_b" ] || [ -z "$PORT_s" ]; then
  fail redis_serve_start "$(cat serve-a.err serve-b.err serve-s.err | tail -c 600)"
  exit 0
fi
pass redis_serve_start

NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || NGINX=$(bash "$KEEL_SRC/tools/get-nginx.sh" "$KEEL_SRC/$BUILD/nginx" 2> /dev/null)
PORT_n=$(free_port)
mkdir -p ng
cat > ng/nginx.conf <<EOF
$([ "$(id -u)" = 0 ] && echo "user root root;")
worker_processes 1;
daemon off;
pid $T/ng/nginx.pid;
error_log $T/ng/error.log warn;
events { worker_connections 64; }
http {
    access_log $T/ng/access.log;
    client_body_temp_path $T/ng; proxy_temp_path $T/ng; fastcgi_temp_path $T/ng; uwsgi_temp_path $T/ng; scgi_temp_path $T/ng;
    upstream keel { server 127.0.0.1:$PORT_a; server 127.0.0.1:$PORT_b; }
    server {
        listen 127.0.0.1:$PORT_n;
        location / { proxy_pass http://keel; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_next_upstream off; }
    }
}
EOF
NGINX_PID=
if [ -x "$NGINX" ]; then
  "$NGINX" -p "$T/ng" -e "$T/ng/error.log" -c "$T/ng/nginx.conf" > /dev/null 2>&1 &
  NGINX_PID=$!
  at_exit '[ -n "$NGINX_PID" ] && kill $NGINX_PID 2>/dev/null && wait $NGINX_PID 2>/dev/null'
  for i in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT_n/v2/health/live" && break; sleep 0.05; done
fi

post() { # PORT PATH BODY -> body in $T/resp, status echoed
  curl -s -m 10 -o "$T/resp" -w '%{http_code}' -H 'Content-Type: application/json' -X POST "http://127.0.0.1:$1$2" -d "$3"
}
get() { curl -s -m 10 -o "$T/resp" -w '%{http_code}' "http://127.0.0.1:$1$2"; }

RECS="{\"instances\": [$(paste -sd, rec.jsonl)]}"
EV='{"instances": [{"user_id": 5, "item_price": 90.0, "ts": "2030-01-01T08:00:00Z", "category": "books"}, {"user_id": 17, "item_price": 1.0, "ts": "2030-01-02T22:00:00Z", "category": "toys"}]}'
via=${NGINX_PID:+$PORT_n}
via=${via:-$PORT_a}
[ -n "$NGINX_PID" ] && pass redis_nginx_starts || fail redis_nginx_starts "no nginx ($NGINX): the replicas are asked directly"
st=$(post "$via" /v2/models/ctr/events "$EV")
[ "$st" = 200 ] && grep -q '"appended":2' "$T/resp" && pass redis_events_endpoint || fail redis_events_endpoint "$st $(cat "$T/resp")"
st=$(post "$PORT_s" /v2/models/ctr/events "$EV")
[ "$st" = 200 ] && pass redis_events_endpoint_sqlite || fail redis_events_endpoint_sqlite "$st $(cat "$T/resp")"

same=1 first= why=
for port in $PORT_a $PORT_b $PORT_s $via $via $via $via; do
  st=$(post "$port" /v1/models/ctr:predict "$RECS")
  [ "$st" = 200 ] || { same=0; why="port $port: $st $(cat "$T/resp")"; break; }
  if [ -z "$first" ]; then first=$(cat "$T/resp"); elif [ "$(cat "$T/resp")" != "$first" ]; then
    same=0; why="port $port answered $(cat "$T/resp"), first $first"; break
  fi
done
[ $same = 1 ] && pass redis_replicas_same_prediction || fail redis_replicas_same_prediction "$why"
if [ -n "$NGINX_PID" ]; then
  n=$(grep -c 'predict' "$T/ng/access.log" 2> /dev/null)
  [ "${n:-0}" -ge 4 ] && pass redis_predict_through_nginx || fail redis_predict_through_nginx "nginx log: $n predict lines"
fi

# a batch with a bad record: named, nothing appended (the next prediction is unchanged)
BAD='{"instances": [{"user_id": 5, "item_price": 1.0, "ts": "2030-01-01T09:00:00Z", "category": "books"}, {"item_price": 1.0, "ts": "2030-01-01T09:00:00Z", "category": "books"}]}'
st=$(post "$PORT_a" /v2/models/ctr/events "$BAD")
[ "$st" = 400 ] && grep -q 'records\[1\]' "$T/resp" && grep -q user_id "$T/resp" && pass redis_events_bad_record_named ||
  fail redis_events_bad_record_named "$st $(cat "$T/resp")"
post "$PORT_b" /v1/models/ctr:predict "$RECS" > /dev/null
[ "$(cat "$T/resp")" = "$first" ] && pass redis_events_bad_batch_appends_nothing || fail redis_events_bad_batch_appends_nothing "$(cat "$T/resp")"
st=$(post "$PORT_a" /v2/models/nosuch/events "$EV")
[ "$st" = 404 ] && pass redis_events_unknown_model_404 || fail redis_events_unknown_model_404 "$st"
st=$(get "$PORT_a" /v2/health/ready)
[ "$st" = 200 ] && pass redis_ready_while_up || fail redis_ready_while_up "$st $(cat "$T/resp")"

# ---- Redis down: bounded 503s, readiness false, empty windows counted ----
redis_stop
t0=$(date +%s%N)
st=$(post "$PORT_a" /v1/models/ctr:predict "$RECS")
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$st" = 503 ] && grep -q "feature store unavailable" "$T/resp" && pass redis_down_predict_503 ||
  fail redis_down_predict_503 "$st $(cat "$T/resp")"
[ "$ms" -lt 3000 ] && pass redis_down_no_hang || fail redis_down_no_hang "answered after $ms ms"
st=$(post "$PORT_a" /v2/models/ctr/events "$EV")
[ "$st" = 503 ] && grep -q "feature store unavailable" "$T/resp" && pass redis_down_events_503 || fail redis_down_events_503 "$st $(cat "$T/resp")"
st=$(get "$PORT_a" /v2/health/ready)
[ "$st" = 503 ] && grep -q "feature store" "$T/resp" && pass redis_down_not_ready || fail redis_down_not_ready "$st $(cat "$T/resp")"
st=$(post "$PORT_b" /v1/models/ctr_empty:predict "$RECS")
[ "$st" = 200 ] && pass redis_down_on_store_error_empty || fail redis_down_on_store_error_empty "$st $(cat "$T/resp")"
get "$PORT_b" /metrics > /dev/null
grep -q '^keel_feature_store_errors_total{model="ctr_empty"} [1-9]' "$T/resp" && pass redis_down_errors_counted ||
  fail redis_down_errors_counted "$(grep feature_store "$T/resp")"

# ---- Redis back (empty: no persistence): the same replicas reconnect ----
redis_restart || fail redis_restart "redis-server did not come back"
sleep 0.2
st=$(post "$PORT_a" /v2/models/ctr/events "$EV")
[ "$st" = 200 ] && pass redis_reconnect_events || fail redis_reconnect_events "$st $(cat "$T/resp")"
st=$(post "$PORT_a" /v1/models/ctr:predict "$RECS")
[ "$st" = 200 ] && pass redis_reconnect_predict || fail redis_reconnect_predict "$st $(cat "$T/resp")"
st=$(get "$PORT_a" /v2/health/ready)
[ "$st" = 200 ] && pass redis_reconnect_ready || fail redis_reconnect_ready "$st $(cat "$T/resp")"

# ---- Redis restarted while the replicas were idle: their pooled connections
#      are stale; the first read after it still answers (one retry, fresh) ----
post "$PORT_a" /v1/models/ctr:predict "$RECS" > /dev/null
get "$PORT_b" /v2/health/ready > /dev/null
redis_restart || fail redis_restart_idle "redis-server did not come back"
st=$(post "$PORT_a" /v1/models/ctr:predict "$RECS")
[ "$st" = 200 ] && pass redis_restart_idle_first_predict || fail redis_restart_idle_first_predict "$st $(cat "$T/resp")"
st=$(get "$PORT_b" /v2/health/ready)
[ "$st" = 200 ] && pass redis_restart_idle_first_ready || fail redis_restart_idle_first_ready "$st $(cat "$T/resp")"
