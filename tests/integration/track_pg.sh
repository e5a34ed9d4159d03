# The experiment store on PostgreSQL: a real server started for the test
# (lib_pg.sh), then the same checks as on SQLite — the store and registry
# unit tests (KEEL_TEST_TRACK_URL: each test gets a fresh database) and the
# command-line test track_cli.sh (names prefixed pg_) — plus what only a
# server store has: URL forms, connection errors naming host/port/database
# without hanging, the password kept out of messages, two processes
# migrating one new database at once, artifacts refused without --artifacts,
# `keel runs migrate` copying a SQLite store exactly, and a kill -9 of the
# server itself mid-write losing no committed point.
. "$KEEL_SRC/tests/integration/lib.sh"
. "$KEEL_SRC/tests/integration/lib_pg.sh"
if ! pg_available; then
  echo "SKIP track_pg: no PostgreSQL server binaries in $PG_BIN (mk/packages.txt: postgresql)"
  
  exit 0
fi
pg_start || exit 0
K=$KEEL
UNIT=$(dirname "$KEEL")/keel-unit

# 1. the store/registry unit tests against the server
if [ -x "$UNIT" ]; then
  KEEL_TEST_TRACK_URL="postgresql://keel@127.0.0.1:$PG_PORT" "$UNIT" track_ > "$T/unit.out" 2>&1
  sed -n 's/^\(PASS\|FAIL\) \([a-z_0-9]*\).*/\1 pg_unit_\2/p' "$T/unit.out"
  grep -q '^unit: [0-9]* passed, 0 failed' "$T/unit.out" && pass pg_unit_all || fail pg_unit_all "$(tail -c 600 "$T/unit.out")"
fi

# 2. the store's command-line tests against the server, each on a fresh
# database (their check names prefixed pg_)
run_on_pg() {
  local db=${1%.*} cmd=bash
  case $1 in *.py) cmd=$PYTHON ;; esac
  local u
  u=$(pg_newdb "$db") || { fail "pg_${db}_database" "could not create it"; return; }
  mkdir -p "$T/art_$db"
  KEEL_TEST_TRACKING="$u" KEEL_ARTIFACTS="$T/art_$db" $cmd "$KEEL_SRC/tests/integration/$1" > "$T/$db.out" 2>&1
  sed -n 's/^\(PASS\|FAIL\) /\1 pg_/p' "$T/$db.out"
  grep -q '^PASS' "$T/$db.out" && ! grep -q '^FAIL' "$T/$db.out" && pass "pg_${db}_ran" || fail "pg_${db}_ran" "$(tail -c 600 "$T/$db.out")"
}
for t in track_cli.sh track_concurrent.sh track_kill.sh track_ui.py ${KEEL_TEST_PG_EXTRA:-tune.sh}; do run_on_pg "$t"; done
url="postgresql://keel@127.0.0.1:$PG_PORT/track_cli"

# 3. URL forms: postgres:// is the same store; --tracking and KEEL_TRACKING
url2="postgres://keel@127.0.0.1:$PG_PORT/track_cli"
expect_rc pg_url_short_form 0 $K --tracking "$url2" runs list --json
$PYTHON -c 'import json,sys; assert len(json.load(open(sys.argv[1])))==3' "$T/out" && pass pg_url_short_form_rows || fail pg_url_short_form_rows "$(head -c 300 "$T/out")"
expect_rc pg_where 0 $K --tracking "$url" runs where
grep -q "127.0.0.1:$PG_PORT" "$T/out" && pass pg_where_names_url || fail pg_where_names_url "$(cat "$T/out")"

# 4. connection errors: name host, port and database; never hang
free=$(pg_free_port)
start=$(date +%s%N)
expect_rc pg_refused 1 $K --tracking "postgresql://keel@127.0.0.1:$free/nodb" runs list
ms=$((($(date +%s%N) - start) / 1000000))
grep -q "127.0.0.1:$free database nodb" "$T/err" && pass pg_refused_names_server || fail pg_refused_names_server "$(cat "$T/err")"
[ "$ms" -lt 5000 ] && pass pg_refused_fast || fail pg_refused_fast "${ms} ms"
# a port that accepts and never answers: connect_timeout, not a hang
/usr/bin/python3 -c '
import socket,sys,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1",0)); s.listen(8)
print(s.getsockname()[1], flush=True)
conns=[]
t=time.time()
while time.time()-t < 30:
    c,_=s.accept(); conns.append(c)
' > "$T/silent.port" &
silent=$!
sleep 0.3
sport=$(head -1 "$T/silent.port")
start=$(date +%s%N)
expect_rc pg_silent_server 1 timeout 20 $K --tracking "postgresql://keel@127.0.0.1:$sport/x?connect_timeout=2" runs list
ms=$((($(date +%s%N) - start) / 1000000))
[ "$ms" -lt 8000 ] && grep -q "127.0.0.1:$sport" "$T/err" && pass pg_silent_server_times_out || fail pg_silent_server_times_out "${ms} ms: $(cat "$T/err")"
kill "$silent" 2> /dev/null
wait "$silent" 2> /dev/null
expect_rc pg_no_db 1 $K --tracking "postgresql://keel@127.0.0.1:$PG_PORT/missing_db" runs list
grep -q 'missing_db' "$T/err" && pass pg_no_db_named || fail pg_no_db_named "$(cat "$T/err")"
# a password never appears in messages
expect_rc pg_password_hidden 1 $K --tracking "postgresql://keel:s3cret@127.0.0.1:$free/nodb" runs list
! grep -q s3cret "$T/err" && pass pg_password_not_shown || fail pg_password_not_shown "$(cat "$T/err")"

# 5. a read-only command on an empty database creates nothing
e_url=$(pg_newdb empty)
expect_rc pg_list_empty_db 1 $K --tracking "$e_url" runs show 1
grep -q 'no experiment store' "$T/err" && pass pg_list_empty_db_message || fail pg_list_empty_db_message "$(cat "$T/err")"
expect_rc pg_list_empty_db_lists_nothing 0 $K --tracking "$e_url" runs list --json
[ "$(tr -d ' \n' < "$T/out")" = "[]" ] && grep -q 'no experiment store' "$T/err" && pass pg_list_empty_db_empty_result || fail pg_list_empty_db_empty_result "$(cat "$T/out" "$T/err")"
[ "$(pg_psql -d empty -tA -c "select count(*) from pg_tables where schemaname='public'")" = 0 ] && pass pg_readonly_creates_nothing || fail pg_readonly_creates_nothing "tables created"

# 6. eight processes open a new database at once: one migration, no errors
m_url=$(pg_newdb race)
for i in 1 2 3 4 5 6 7 8; do
  $K --tracking "$m_url" runs simulate --experiment race --name "r$i" --steps 5 > "$T/race$i.out" 2>&1 &
done
bad=0
for j in $(jobs -p); do wait "$j" || bad=$((bad + 1)); done
[ "$bad" = 0 ] && pass pg_concurrent_first_open || fail pg_concurrent_first_open "$bad failed: $(cat "$T"/race*.out | head -c 600)"
[ "$(pg_psql -d race -tA -c 'select count(*), max(version) from keel_migrations')" = "4|4" ] && pass pg_migrated_once || fail pg_migrated_once "$(pg_psql -d race -tA -c 'select * from keel_migrations')"
[ "$(pg_psql -d race -tA -c 'select count(*) from runs')" = 8 ] && pass pg_concurrent_runs_all_there || fail pg_concurrent_runs_all_there "runs missing"

# 7. artifacts need --artifacts on a server store
mkdir -p "$T/m"
printf 'w' > "$T/m/model.onnx"
expect_rc pg_register_needs_artifacts 1 env -u KEEL_ARTIFACTS $K --tracking "$m_url" models register "$T/m" --name m
grep -q -- '--artifacts' "$T/err" && pass pg_register_needs_artifacts_message || fail pg_register_needs_artifacts_message "$(cat "$T/err")"

# 8. keel runs migrate: SQLite -> PostgreSQL -> SQLite, the same dumps each way
export KEEL_TRACKING="$T/lite"
$K runs simulate --experiment ads --name a --steps 40 --param lr=0.001 --tag team=ads > /dev/null
$K runs simulate --experiment ads --name b --steps 30 --metrics 3 --param lr=0.01 --status failed > /dev/null
printf 'w1' > "$T/m/model.onnx"
$K models register "$T/m" --name iris > /dev/null
printf 'w2' > "$T/m/model.onnx"
$K models register "$T/m" --name iris --alias champion > /dev/null
$K models alias iris champion 1 > /dev/null
unset KEEL_TRACKING
g_url=$(pg_newdb migrated)
expect_rc pg_migrate_to_pg 0 $K runs migrate --from "$T/lite" --to "$g_url" --artifacts "$T/gart"
grep -q 'copied 2 runs, 170 metric points, 2 model versions, 2 alias changes, 2 objects' "$T/out" && pass pg_migrate_counts || fail pg_migrate_counts "$(cat "$T/out")"
expect_rc pg_migrate_back 0 $K runs migrate --from "$g_url" --from-artifacts "$T/gart" --to "$T/lite2"
same=1
for c in "runs list --json" "runs show 1 --json" "runs show 2 --json" "runs export --format csv --history" "models show iris --json" "models history iris"; do
  $K --tracking "$T/lite" $c > "$T/d1" 2>&1
  $K --tracking "$g_url" --artifacts "$T/gart" $c > "$T/d2" 2>&1
  $K --tracking "$T/lite2" $c > "$T/d3" 2>&1
  if ! cmp -s "$T/d1" "$T/d2" || ! cmp -s "$T/d1" "$T/d3"; then
    same=0
    fail pg_migrate_same_dump "$c: $(diff "$T/d1" "$T/d2" | head -5) $(diff "$T/d1" "$T/d3" | head -5)"
  fi
done
[ "$same" = 1 ] && pass pg_migrate_same_dump
expect_rc pg_migrate_verify 0 $K --tracking "$g_url" --artifacts "$T/gart" models verify
expect_rc pg_migrate_resolve 0 $K --tracking "$g_url" --artifacts "$T/gart" models resolve iris@champion "$T/res"
[ "$(cat "$T/res/model.onnx")" = w1 ] && pass pg_migrate_resolve_content || fail pg_migrate_resolve_content "$(cat "$T/res/model.onnx")"
expect_rc pg_migrate_not_empty 1 $K runs migrate --from "$T/lite" --to "$g_url" --artifacts "$T/gart"
grep -q 'not empty' "$T/err" && pass pg_migrate_not_empty_message || fail pg_migrate_not_empty_message "$(cat "$T/err")"
expect_rc pg_migrate_usage 2 $K runs migrate --from "$T/lite"
# 9. kill -9 of the server (postmaster and backends) while a writer logs:
# the writer fails at once with a message naming the server, every batch it
# reported committed is there after crash recovery, and the run is marked killed
s_url=$(pg_newdb srvkill)
$K --tracking "$s_url" runs simulate --name heavy --steps 100000000 --metrics 4 --batch 500 --progress > "$T/sk.progress" 2> "$T/sk.err" &
pid=$!
for _ in $(seq 600); do
  n=$(grep -c committed "$T/sk.progress" 2> /dev/null || true)
  [ "${n:-0}" -ge 40 ] && break
  sleep 0.05
done
pg_kill9 && pass pg_server_killed || fail pg_server_killed "the postmaster survived SIGKILL"
start=$(date +%s%N)
for _ in $(seq 300); do kill -0 "$pid" 2> /dev/null || break; sleep 0.05; done
ms=$((($(date +%s%N) - start) / 1000000))
if kill -0 "$pid" 2> /dev/null; then
  fail pg_server_kill_writer_exits "the writer still runs ${ms} ms after the server died"
  kill -9 "$pid"
fi
wait "$pid"
rc=$?
[ "$rc" = 1 ] && grep -q "127.0.0.1:$PG_PORT" "$T/sk.err" && pass pg_server_kill_writer_fails_clearly ||
  fail pg_server_kill_writer_fails_clearly "rc=$rc after ${ms} ms: $(tail -c 400 "$T/sk.err")"
committed=$(grep committed "$T/sk.progress" | tail -1 | awk '{print $2}')
pg_restart && pass pg_server_restarted || fail pg_server_restarted "$(tail -c 400 "$PG_DIR/server.log")"
expect_rc pg_server_kill_reopen 0 $K --tracking "$s_url" runs show 1 --json
$PYTHON - "$T/out" "${committed:-0}" 2> "$T/py.err" <<'PY' && pass pg_server_kill_no_committed_point_lost || fail pg_server_kill_no_committed_point_lost "$(cat "$T/py.err")"
import json, sys
r = json.load(open(sys.argv[1]))
committed = int(sys.argv[2])
assert committed > 0, "nothing was committed before the kill"
assert committed <= r["points"] <= committed + 500, (committed, r["points"])
assert r["points"] % 500 == 0, r["points"]
assert r["status"] == "killed", r["status"]
PY
exit 0
