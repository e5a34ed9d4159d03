#!/usr/bin/env bash
# A model that does not fit --memory-limit is reported as such, not as a
# corrupt file: keel inspect says "memory limit ... reached while loading",
# and keel serve lists the version as refused for that reason; a truncated
# copy still says "corrupt".
. "$KEEL_SRC/tests/integration/lib.sh"
cd "$T"
$PYTHON - <<'P'
import numpy as np
np.save("x.npy", np.random.RandomState(0).rand(8, 1024).astype(np.float32))
np.save("y.npy", (np.arange(8) % 2).astype(np.int64))
P
cat > spec.yaml <<'Y'
input: {shape: [1024]}
layers:
  - {type: linear, out: 2048}
  - {type: linear, out: 2}
loss: {type: cross_entropy}
optimizer: {type: sgd, lr: 0.01}
train: {epochs: 1, batch_size: 8, val_fraction: 0}
data: {x: x.npy, y: y.npy}
Y
if ! "$KEEL" train spec.yaml --out run --quiet > train.log 2>&1; then
  fail memlimit_model_trained "$(tail -c 300 train.log)"; exit 0
fi
expect_rc memlimit_inspect_fits 0 "$KEEL" inspect run/model.onnx
expect_rc memlimit_inspect_refused 1 "$KEEL" --memory-limit 4M inspect run/model.onnx
grep -q "memory limit 4.00 MiB reached while loading run/model.onnx (needs at least" "$T/err" && ! grep -q corrupt "$T/err" \
  && pass memlimit_inspect_names_limit || fail memlimit_inspect_names_limit "$(head -c 400 "$T/err")"
head -c 100000 run/model.onnx > cut.onnx
expect_rc memlimit_truncated_refused 1 "$KEEL" inspect cut.onnx
grep -q "corrupt or truncated" "$T/err" && pass memlimit_truncated_still_corrupt || fail memlimit_truncated_still_corrupt "$(head -c 300 "$T/err")"

mkdir -p repo/big/1 && cp run/model.onnx repo/big/1/model.onnx
port=$($PYTHON -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$KEEL" --memory-limit 4M serve repo --port "$port" > serve.log 2>&1 &
pid=$!
idx=""
for _ in $(seq 1 100); do
  idx=$(curl -s -X POST "http://127.0.0.1:$port/v2/repository/index" 2>/dev/null) && [ -n "$idx" ] && break
  sleep 0.1
done
kill $pid 2>/dev/null; wait $pid 2>/dev/null
echo "$idx" | grep -q '"reason":"[^"]*memory limit 4.00 MiB reached while loading' \
  && pass memlimit_serve_reason || fail memlimit_serve_reason "index: $(echo "$idx" | head -c 300)"
grep -q "version 1 refused: memory limit" serve.log && pass memlimit_serve_log || fail memlimit_serve_log "$(head -c 300 serve.log)"
