#!/usr/bin/env bash
# bench/serve/json_bench.sh: builds bench/serve/json_bench.c against
# build/libkeel.a (or $LIB) and times the request reader on the bench's
# request body (the body of run.sh). Usage: json_bench.sh [ROUNDS] [PARSES]
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}; LIB=${LIB:-$BUILD/libkeel.a}; PY=/usr/bin/python3
mkdir -p "$BUILD/bench"
out=$BUILD/bench/json_bench${TAG:-}
gcc -O2 -std=c11 -march=x86-64-v3 -D_GNU_SOURCE -pthread -Iinclude bench/serve/json_bench.c "$LIB" \
  $(pkg-config --libs libcrypto yaml-0.1 libcjson) -lm -o "$out"
body=$BUILD/bench/serve_body.json
[ -s "$body" ] || $PY - "$body" <<'PY'
import json, sys
import numpy as np
x = np.random.default_rng(0).standard_normal((1, 784)).astype(np.float32)
with open(sys.argv[1], "w") as f:
    json.dump({"id": "bench", "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 784],
                                          "data": [float("%.6g" % v) for v in x.ravel()]}]}, f)
PY
"$out" "$body" "${1:-100}" "${2:-100}"
