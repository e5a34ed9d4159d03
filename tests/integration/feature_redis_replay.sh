# The online store on Redis: the replay test of the in-memory store
# (feature_online_equals_offline: every row of a click log transformed online
# before it is appended gives apply's values bit for bit) run against a real
# redis-server, then the command line: materialize / push / transform with
# --store redis://..., and the failure path (server stopped: a clear error in
# bounded time, no hang; restarted: the same handle works again).
. "$KEEL_SRC/tests/integration/lib.sh"
. "$KEEL_SRC/tests/integration/lib_redis.sh"
redis_start || exit 0
cd "$T"

# 1. the unit replay against Redis
if KEEL_TEST_REDIS_URL="$REDIS_URL" "$KEEL_SRC/$BUILD/keel-unit" feature_online_equals_offline > unit.out 2>&1; then
  grep -q "^PASS feature_online_equals_offline_redis" unit.out && pass redis_replay_equals_offline ||
    fail redis_replay_equals_offline "$(grep -v '^PASS' unit.out | head -c 400)"
else
  fail redis_replay_equals_offline "$(grep -v '^PASS' unit.out | head -c 600)"
fi
