# 4 processes logging into one store at once for a few seconds: zero lock
# errors, zero lost points (every reported point is in the store).
. "$KEEL_SRC/tests/integration/lib.sh"
export KEEL_TRACKING="${KEEL_TEST_TRACKING:-$T/store}" # track_pg.sh: a PostgreSQL URL
$KEEL runs simulate --experiment init --steps 1 > /dev/null 2>&1   # create the store first (read-only commands never do)
pids=""
for i in 1 2 3 4; do
  $KEEL runs simulate --experiment conc --name "w$i" --duration 3 --batch 100 --metrics 5 --json > "$T/w$i.json" 2> "$T/w$i.err" &
  pids="$pids $!"
done
ok=1
for p in $pids; do wait $p || ok=0; done
[ $ok = 1 ] && pass track_concurrent_all_exit_0 || fail track_concurrent_all_exit_0 "$(cat "$T"/w*.err)"
expect_rc track_concurrent_list 0 $KEEL runs export --format json --filter 'experiment = "conc"'
$PYTHON - "$T" 2>"$T/py.err" <<'PY' && pass track_concurrent_no_loss || fail track_concurrent_no_loss "$(cat "$T/py.err")"
import json, sys
t = sys.argv[1]
runs = {r["name"]: r for r in json.load(open(t + "/out"))}
total = 0
for i in range(1, 5):
    w = json.load(open("%s/w%d.json" % (t, i)))
    assert w["lock_errors"] == 0, w
    r = runs["w%d" % i]
    assert r["points"] == w["points"], (r["points"], w["points"])
    assert r["status"] == "finished"
    total += w["points"]
assert total > 4000, total
print("points", total, file=sys.stderr)
PY
exit 0
