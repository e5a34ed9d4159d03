# kill -9 during heavy logging: the next open marks the run killed and
# every committed point is still there.
. "$KEEL_SRC/tests/integration/lib.sh"
export KEEL_TRACKING="${KEEL_TEST_TRACKING:-$T/store}" # track_pg.sh: a PostgreSQL URL
$KEEL runs simulate --name heavy --steps 100000000 --metrics 4 --batch 500 --progress > "$T/progress" 2> "$T/sim.err" &
pid=$!
# wait until a good number of batches are committed
for _ in $(seq 600); do
  n=$(grep -c committed "$T/progress" 2>/dev/null || true)
  [ "${n:-0}" -ge 40 ] && break
  sleep 0.05
done
kill -9 $pid
wait $pid 2>/dev/null
committed=$(tail -1 "$T/progress" | awk '{print $2}')
[ -n "$committed" ] && [ "$committed" -gt 0 ] && pass track_kill_logged || { fail track_kill_logged "nothing committed: $(cat "$T/sim.err")"; exit 0; }
expect_rc track_kill_reopen 0 $KEEL runs show 1 --json
$PYTHON - "$T/out" "$committed" 2>"$T/py.err" <<'PY' && pass track_kill_state || fail track_kill_state "$(cat "$T/py.err")"
import json, sys
r = json.load(open(sys.argv[1]))
committed = int(sys.argv[2])
assert r["status"] == "killed", r["status"]
# the last printed count is a lower bound; at most one more batch committed
assert committed <= r["points"] <= committed + 500, (committed, r["points"])
assert r["points"] % 500 == 0, r["points"]
assert r["end_us"] is not None
PY
# a live run is not marked killed by another process opening the store
$KEEL runs simulate --name live --duration 6 --batch 50 > /dev/null 2>&1 &
live=$!
for _ in $(seq 100); do
  $KEEL runs list --filter 'name = "live"' --json > "$T/live.json" 2>/dev/null
  grep -q '"live"' "$T/live.json" && break
  sleep 0.1
done
expect_rc track_kill_live_list 0 $KEEL runs list --filter 'name = "live"' --json
grep -q '"running"' "$T/out" && pass track_kill_live_not_stale || fail track_kill_live_not_stale "$(grep status "$T/out")"
wait $live
expect_rc track_kill_live_done 0 $KEEL runs list --filter 'name = "live" and status = "finished"'
exit 0
