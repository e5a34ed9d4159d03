#!/usr/bin/env bash
# keel loader bench end to end: JPEGs (PIL) -> a shard set (build/image-tool's
# minimal pack) -> the loader; bad input: a corrupt record names its key.
. "$KEEL_SRC/tests/integration/lib.sh"
TOOL="$KEEL_SRC/${BUILD:-build}/image-tool"
if ! $PYTHON - "$T/img" > "$T/gen.log" 2>&1 <<'PY'
import sys, os
import numpy as np
from PIL import Image
d = sys.argv[1]
rng = np.random.default_rng(1)
for i in range(40):
    os.makedirs(f"{d}/c{i % 2}", exist_ok=True)
    Image.fromarray(rng.integers(0, 255, (48 + i % 5, 64, 3), dtype=np.uint8)).save(f"{d}/c{i % 2}/{i:03d}.jpg", quality=85)
Image.fromarray(rng.integers(0, 255, (40, 40), dtype=np.uint8)).save(f"{d}/c0/gray.png")
open(f"{d}/c1/broken.jpg", "wb").write(b"\xff\xd8\xff\xe0 truncated")
PY
then fail loader_cli_data "$(tail -c 300 "$T/gen.log")"; exit 0; fi
( cd "$T/img" && find . -name '*.jpg' -o -name '*.png' | grep -v broken | sort | awk '{l = ($0 ~ /c1/); print $0, l}' ) > "$T/list"
( cd "$T/img" && "$TOOL" shards "$T/ok" 2 < "$T/list" ) || fail loader_cli_pack "image-tool shards failed"
( cd "$T/img" && { cat "$T/list"; echo "./c1/broken.jpg 1"; } | "$TOOL" shards "$T/bad" 2 )

if expect_rc loader_bench_runs 0 $KEEL loader bench "$T/ok" --batch 8 --size 32 --resize 40 --epochs 2 --json; then
  out=$($KEEL loader bench "$T/ok" --batch 8 --size 32 --resize 40 --epochs 2 --json)
  if $PYTHON -c "import json,sys; j=json.loads(sys.argv[1]); assert j['images']==82 and j['batches']==12 and j['images_per_s']>0 and 0<=j['wait_share']<=1, j" "$out"; then
    pass loader_bench_json; else fail loader_bench_json "$out"; fi
fi
check loader_bench_undistort_multiple $KEEL loader bench "$T/ok" --batch 4 --size 64 --resize 64 --multiple 64 --undistort 60,60,32,24,-0.2,0.05,0.001,0.001
expect_rc loader_bench_bad_undistort 2 $KEEL loader bench "$T/ok" --undistort 1,2,3
check loader_bench_text $KEEL loader bench "$T/ok" --batch 4 --size 24 --workers 3 --crop center --no-flip
$KEEL loader bench "$T/bad" --batch 4 --size 24 > /dev/null 2> "$T/bad.err"
rc=$?
if [ $rc = 1 ] && grep -q "broken.jpg" "$T/bad.err"; then pass loader_bench_corrupt_record; else fail loader_bench_corrupt_record "rc $rc: $(head -c 300 "$T/bad.err")"; fi
expect_rc loader_bench_usage 2 $KEEL loader bench "$T/ok" --batch 0
expect_rc loader_bench_no_shards 1 $KEEL loader bench "$T/img"
exit 0
