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

# 2. keel pipeline with stages.features.store: redis:// materializes there
#    (no features.db in the features dataset nor in the exported version)
"$KEEL" data gen-clicks clicks.csv --rows 4000 --seed 3 > /dev/null
cp -r "$KEEL_SRC/examples/clicks" ex && rm -rf ex/out-* ex/data
if "$KEEL" --tracking "$T/runs" pipeline run ex/pipeline.yaml --out "$T/pl" --set "stages.ingest.source=$T/clicks.csv" \
  --set "stages.features.store=$REDIS_URL" --set stages.evaluate.max_gap_to_reference=1 --json > pl.json 2> pl.err; then
  h=$($PYTHON -c 'import json,sys; print(json.load(open(sys.argv[1]))["feature_hash"][:16])' pl/features/features.json)
  n=$(redis-cli -p "$REDIS_PORT" --scan --pattern "keel:fs:$h:*" | wc -l)
  [ "$n" -gt 100 ] && [ ! -e pl/features/features.db ] && [ ! -e pl/repo/ctr/1/features.db ] && pass redis_pipeline_store ||
    fail redis_pipeline_store "$n histories in Redis for $h; $(ls pl/features pl/repo/ctr/1 | tr '\n' ' ')"
else
  fail redis_pipeline_store "$(tail -c 400 pl.err)"
fi
"$KEEL" --tracking "$T/runs" pipeline run ex/pipeline.yaml --out "$T/pl2" --set "stages.ingest.source=$T/clicks.csv" \
  --set "stages.features.store=/tmp/not-a-url" --json > pl2.json 2> pl2.err
grep -q "store: expected redis://" pl2.err pl2.json && [ ! -e pl2/ingest ] && pass redis_pipeline_store_not_url ||
  fail redis_pipeline_store_not_url "$(tail -c 300 pl2.err); $(ls pl2 2>&1)"

# 3. keel models register --store redis://: checked (it must answer), not bundled
if [ -d pl/repo/ctr/1 ]; then
  expect_rc redis_register_needs_store 1 "$KEEL" --tracking "$T/runs" models register pl/repo/ctr/1 --name ctr2
  expect_rc redis_register_url 0 "$KEEL" --tracking "$T/runs" models register pl/repo/ctr/1 --name ctr2 --store "$REDIS_URL" --json
  expect_rc redis_register_url_down 1 "$KEEL" --tracking "$T/runs" models register pl/repo/ctr/1 --name ctr3 \
    --store "redis://127.0.0.1:$(free_port)/0"
  grep -q "online store redis://127.0.0.1" "$T/err" && pass redis_register_url_down_named || fail redis_register_url_down_named "$(cat "$T/err")"
fi
