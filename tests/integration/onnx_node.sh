#!/usr/bin/env bash
# ONNX backend node tests: generated at test time with Debian's python3-onnx
# 1.12 into $BUILD/onnx-node-tests (cached), then run by build/keel-onnx-test:
# every test whose operators keel supports must pass, and at least 95 % of
# all node tests must pass.
. "$KEEL_SRC/tests/integration/lib.sh"
dir="$KEEL_SRC/${BUILD:-build}/onnx-node-tests"
runner="$KEEL_SRC/${BUILD:-build}/keel-onnx-test"
if [ ! -f "$dir/.stamp" ]; then
  rm -rf "$dir"
  if ! $PYTHON "$KEEL_SRC/tests/onnx/gen_node_tests.py" "$dir" > "$T/gen.log" 2>&1; then
    fail onnx_node_generate "$(tail -c 400 "$T/gen.log")"
    exit 1
  fi
  touch "$dir/.stamp"
fi
[ -x "$runner" ] || { fail onnx_node_tests "missing $runner (make)"; exit 1; }
"$runner" --min-pass 95 "$dir/node"
