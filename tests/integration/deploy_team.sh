# The team deployment of docs/deployment.md, run for real on loopback: a
# PostgreSQL store with a shared artifacts folder, one Redis, two keel serve
# replicas started with the shipped files' own arguments (the systemd
# drop-in deploy/systemd/keel-team.conf and the Kubernetes overlay
# deploy/k8s/team, built as kustomize would), behind deploy/nginx/keel.conf.
# Checks: the manifests keep secrets out of args and pod specs and agree
# with each other (Secret keys, Redis Service, artifacts volume); both
# replicas serve the registry alias ctr@prod and answer the same prediction
# for the same record after events reach one of them; moving the alias and
# reloading (SIGHUP) switches both to the new version; with PostgreSQL
# down a reload fails and the version keeps serving; with one replica
# killed every request through nginx still succeeds.
. "$KEEL_SRC/tests/integration/lib.sh"
. "$KEEL_SRC/tests/integration/lib_pg.sh"
. "$KEEL_SRC/tests/integration/lib_redis.sh"
pg_available || { fail team_pg "no PostgreSQL server binaries in $PG_BIN (mk/packages.txt: postgresql)"; exit 0; }
pg_start || exit 0
redis_start || exit 0
at_exit pg_stop # redis_start's EXIT trap replaced pg_start's
cd "$T"
PYLIB="$KEEL_SRC/tests/integration/pylib"

# ---- the shipped files: what each replica is started with ----
$PYTHON - "$KEEL_SRC/deploy" > manifest.out 2> manifest.err <<'EOF'
import os, re, shlex, sys
sys.path.insert(0, os.path.join(os.environ["KEEL_SRC"], "tests", "integration", "pylib"))
import kustomize
D = sys.argv[1]
ok = lambda name, cond, why="": print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + str(why)))
docs = kustomize.build(os.path.join(D, "k8s", "team"))
dep = kustomize.find(docs, "Deployment", "keel-serve")["spec"]["template"]["spec"]
c = dep["containers"][0]
env = {e["name"]: e for e in c.get("env", [])}
secret = kustomize.find(docs, "Secret", "keel-store")
keys = secret.get("stringData", {})
refs = {n: env[n].get("valueFrom", {}).get("secretKeyRef", {}) for n in ("KEEL_TRACKING", "KEEL_FEATURE_STORE") if n in env}
ok("team_k8s_urls_from_secret", len(refs) == 2 and all(r.get("name") == "keel-store" and r.get("key") in keys for r in refs.values()), refs)
inline = [w for w in c.get("args", []) + [e.get("value", "") for e in env.values()] if re.match(r"(postgres(ql)?|redis)://", str(w))]
ok("team_k8s_no_url_inline", not inline, inline)
fs = keys.get("feature-store-url", "")
m = re.match(r"redis://(?:[^@/]*@)?([^:/?]+):(\d+)", fs)
svc = kustomize.find(docs, "Service", "keel-redis")["spec"]["ports"]
ok("team_k8s_redis_service_matches_secret", m and m.group(1) == "keel-redis" and int(m.group(2)) in [p["port"] for p in svc], (fs, svc))
pvc = kustomize.find(docs, "PersistentVolumeClaim", "keel-artifacts")
mounts = {v["name"]: v for v in c.get("volumeMounts", [])}
vols = {v["name"]: v for v in dep.get("volumes", [])}
art = env.get("KEEL_ARTIFACTS", {}).get("value")
ok("team_k8s_artifacts_shared", "ReadWriteMany" in pvc["spec"]["accessModes"] and art and mounts.get("artifacts", {}).get("mountPath") == art
   and mounts["artifacts"].get("readOnly") and vols.get("artifacts", {}).get("persistentVolumeClaim", {}).get("claimName") == "keel-artifacts",
   (art, mounts, vols))
ok("team_k8s_no_model_volume", "models" not in mounts and "models" not in vols, (mounts, vols))
args = c["args"]
ok("team_k8s_serves_alias", args[:2] == ["serve", "ctr@prod"], args)
# the systemd drop-in
unit = open(os.path.join(D, "systemd", "keel-team.conf")).read()
lines = re.sub(r"\\\n\s*", " ", unit).splitlines()
execs = [l.split("=", 1)[1] for l in lines if l.startswith("ExecStart=")]
ok("team_systemd_resets_execstart", len(execs) == 2 and execs[0] == "", execs)
sd = shlex.split(execs[-1])
ok("team_systemd_secrets_in_file", any(l.startswith("EnvironmentFile=") for l in lines) and not any(re.match(r"(postgres(ql)?|redis)://", w) for w in sd), sd)
ok("team_systemd_serves_alias", sd[1:3] == ["serve", "ctr@prod"], sd)
def runnable(argv, port):  # loopback, the test's port
    out, i = [], 0
    while i < len(argv):
        if argv[i] in ("--port", "-p", "--host"):
            out += [argv[i], port if argv[i] != "--host" else "127.0.0.1"]; i += 2
        else:
            out.append(argv[i]); i += 1
    return out
with open("args_a", "w") as f: f.write("\0".join(runnable(sd[1:], "0")))
with open("args_b", "w") as f: f.write("\0".join(runnable(args, "0")))
EOF
cat manifest.out
grep -q '^FAIL' manifest.out && fail team_manifests "see above"
[ -s args_a ] && [ -s args_b ] || { fail team_manifests_parse "$(tail -c 600 manifest.err)"; exit 0; }

# ---- a model version with a window feature, registered as ctr@prod ----
"$KEEL" data gen-clicks clicks.csv --rows 2000 --seed 5 > /dev/null
cat > spec.yaml <<'EOF'
label: {column: clicked, type: bool}
features:
  - {name: price_z, transform: standardize, input: item_price, type: float64, fill: 0}
  - {name: user_price3, transform: window, agg: mean, events: 3, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}, value: {column: item_price, type: float64, fill: 0}}
EOF
"$KEEL" ingest clicks.csv --schema "$KEEL_SRC/examples/clicks/schema.yaml" --out ds > /dev/null 2> setup.err &&
  "$KEEL" features fit spec.yaml --data ds --out f.json > /dev/null 2>> setup.err ||
  { fail team_setup "$(head -c 400 setup.err)"; exit 0; }
W=$($PYTHON -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["outputs"]))' f.json)
mkdir -p v1 v2 && cp f.json v1/features.json && cp f.json v2/features.json
$PYTHON - "$W" <<'EOF' || { fail team_setup "write_mlp failed"; exit 0; }
import os, sys
sys.path.insert(0, os.path.join(os.environ["KEEL_SRC"], "tests", "integration", "serve"))
from helpers import write_mlp
write_mlp("v1/model.onnx", seed=1, sizes=(int(sys.argv[1]), 8, 2))
write_mlp("v2/model.onnx", seed=2, sizes=(int(sys.argv[1]), 8, 2))
EOF
STORE=$(pg_newdb team)
# a password in the URL, as the Secret holds it (the test server trusts
# loopback and ignores it): it must never reach a log line
STORE=${STORE/keel@/keel:s3cret@}
export KEEL_TRACKING="$STORE" KEEL_ARTIFACTS="$T/art" KEEL_FEATURE_STORE="$REDIS_URL?timeout_ms=2000"
expect_rc team_materialize 0 "$KEEL" features materialize f.json --data ds --store "$KEEL_FEATURE_STORE"
expect_rc team_register 0 "$KEEL" models register v1 --name ctr --alias prod --store "$KEEL_FEATURE_STORE"

# ---- two replicas, one per shipped file, behind the shipped nginx config ----
PIDS=
start_replica() { # NAME ARGSFILE: starts keel with the file's NUL-separated arguments, sets PORT_NAME, PID_NAME
  local name=$1 i
  local -a av
  mapfile -d '' av < "$2"
  "$KEEL" "${av[@]}" --probe-interval 1 --http-threads 1 > "serve-$name.out" 2> "serve-$name.err" &
  PIDS="$PIDS $!"
  eval "PID_$name=$!"
  for i in $(seq 1 300); do
    grep -q "listening on" "serve-$name.out" 2> /dev/null && break
    sleep 0.05
  done
  eval "PORT_$name=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "serve-$name.out")"
}
at_exit 'for p in $PIDS; do kill $p 2>/dev/null; done; for p in $PIDS; do wait $p 2>/dev/null; done'
start_replica a args_a
start_replica b args_b
if [ -z "$PORT_a" ] || [ -z "$PORT_b" ]; then
  fail team_replicas_start "$(tail -c 400 serve-a.err) | $(tail -c 400 serve-b.err)"
  exit 0
fi
pass team_replicas_start
! grep -q 's3cret' serve-a.err serve-b.err && pass team_logs_no_secret || fail team_logs_no_secret "$(grep -h 's3cret' serve-*.err | head -2)"

NGINX=$(bash "$KEEL_SRC/tools/get-nginx.sh" "$KEEL_SRC/$BUILD/nginx" 2> /dev/null)
[ -x "$NGINX" ] || { fail team_nginx "no nginx binary (tools/get-nginx.sh)"; exit 0; }
PORT_n=$(free_port)
mkdir -p ng/t
sed -e "0,/server 127.0.0.1:[0-9]* /s//server 127.0.0.1:$PORT_a /" -e "0,/server 127.0.0.1:80[0-9][0-9] /s//server 127.0.0.1:$PORT_b /" \
  -e "s/listen 80;/listen 127.0.0.1:$PORT_n;/" "$KEEL_SRC/deploy/nginx/keel.conf" > ng/keel.conf
cat > ng/nginx.conf <<EOF
$([ "$(id -u)" = 0 ] && echo "user root root;")
worker_processes 1;
daemon off;
pid $T/ng/nginx.pid;
error_log $T/ng/error.log warn;
events { worker_connections 64; }
http {
    access_log $T/ng/access.log;
    client_body_temp_path $T/ng/t; proxy_temp_path $T/ng/t; fastcgi_temp_path $T/ng/t; uwsgi_temp_path $T/ng/t; scgi_temp_path $T/ng/t;
    include $T/ng/keel.conf;
}
EOF
"$NGINX" -p "$T/ng" -e "$T/ng/error.log" -c "$T/ng/nginx.conf" > /dev/null 2>&1 &
NGINX_PID=$!
at_exit 'kill $NGINX_PID 2>/dev/null; wait $NGINX_PID 2>/dev/null'
for i in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT_n/nginx-health" && break; sleep 0.05; done
grep -c "server 127.0.0.1:$PORT_a \|server 127.0.0.1:$PORT_b " ng/keel.conf | grep -q 2 && pass team_nginx_upstreams || fail team_nginx_upstreams "$(grep server ng/keel.conf)"

post() { curl -s -m 10 -o "$T/resp" -w '%{http_code}' -H 'Content-Type: application/json' -X POST "http://127.0.0.1:$1$2" -d "$3"; }
get() { curl -s -m 10 -o "$T/resp" -w '%{http_code}' "http://127.0.0.1:$1$2"; }
for i in $(seq 1 100); do [ "$(get "$PORT_n" /v2/health/ready)" = 200 ] && break; sleep 0.1; done
st=$(get "$PORT_n" /v2/health/ready)
[ "$st" = 200 ] && pass team_ready_through_nginx || fail team_ready_through_nginx "$st $(cat "$T/resp")"

# events reach replica a only; both replicas (and nginx) answer the same
REC='{"instances": [{"user_id": 7, "item_price": 10.0, "ts": "2031-01-01T10:00:00Z", "category": "books", "clicked": false}]}'
EV='{"instances": [{"user_id": 7, "item_price": 500.0, "ts": "2031-01-01T09:00:00Z", "category": "books"}, {"user_id": 7, "item_price": 900.0, "ts": "2031-01-01T09:30:00Z", "category": "toys"}]}'
post "$PORT_b" /v1/models/ctr:predict "$REC" > /dev/null
before=$(cat "$T/resp")
st=$(post "$PORT_a" /v2/models/ctr/events "$EV")
[ "$st" = 200 ] && pass team_events_to_one_replica || fail team_events_to_one_replica "$st $(cat "$T/resp")"
same=1 first= why=
for port in $PORT_a $PORT_b $PORT_n $PORT_n $PORT_n $PORT_n; do
  st=$(post "$port" /v1/models/ctr:predict "$REC")
  [ "$st" = 200 ] || { same=0; why="port $port: $st $(cat "$T/resp")"; break; }
  if [ -z "$first" ]; then first=$(cat "$T/resp"); elif [ "$(cat "$T/resp")" != "$first" ]; then
    same=0; why="port $port answered $(cat "$T/resp"), first $first"; break
  fi
done
[ $same = 1 ] && [ "$first" != "$before" ] && pass team_replicas_same_features ||
  fail team_replicas_same_features "${why:-the events changed nothing: $before}"

# the alias moves: a reload (SIGHUP, systemctl reload) switches every replica
expect_rc team_register_v2 0 "$KEEL" models register v2 --name ctr --store "$KEEL_FEATURE_STORE"
expect_rc team_alias_move 0 "$KEEL" models alias ctr prod 2
kill -HUP $PID_a $PID_b
switched=0
for i in $(seq 1 150); do
  ga=$(get "$PORT_a" /v2/models/ctr; cat "$T/resp")
  gb=$(get "$PORT_b" /v2/models/ctr; cat "$T/resp")
  case "$ga$gb" in *'"2"'*'"2"'*) if ! echo "$ga$gb" | grep -q '"1"'; then switched=1; break; fi ;; esac
  sleep 0.1
done
[ $switched = 1 ] && pass team_alias_reload_both || fail team_alias_reload_both "a: $ga b: $gb"
post "$PORT_n" /v1/models/ctr:predict "$REC" > /dev/null
v2=$(cat "$T/resp")
post "$PORT_a" /v1/models/ctr:predict "$REC" > /dev/null
[ "$v2" != "$first" ] && [ "$(cat "$T/resp")" = "$v2" ] && pass team_v2_serves_everywhere || fail team_v2_serves_everywhere "nginx $v2, a $(cat "$T/resp"), v1 $first"

# the store goes away: a reload fails, is logged, and the version keeps serving
pg_kill9
kill -HUP $PID_b
for i in $(seq 1 100); do grep -q "keeps serving" serve-b.err && break; sleep 0.05; done
st=$(post "$PORT_b" /v1/models/ctr:predict "$REC")
[ "$st" = 200 ] && [ "$(cat "$T/resp")" = "$v2" ] && grep -q "ctr@prod.*the current version keeps serving" serve-b.err &&
  pass team_store_down_keeps_serving || fail team_store_down_keeps_serving "$st $(cat "$T/resp") $(grep "keeps serving" serve-b.err)"
! grep -q s3cret serve-b.err && pass team_store_down_no_secret || fail team_store_down_no_secret "$(grep s3cret serve-b.err | head -1)"

# one replica dies: every request through nginx still succeeds
kill -9 $PID_a
sts=
for i in $(seq 1 10); do sts="$sts $(post "$PORT_n" /v1/models/ctr:predict "$REC")"; done
[ "$(echo $sts)" = "200 200 200 200 200 200 200 200 200 200" ] && pass team_failover || fail team_failover "$sts"
exit 0
