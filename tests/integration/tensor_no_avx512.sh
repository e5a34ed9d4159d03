#!/usr/bin/env bash
# The kernels' non-AVX-512 paths (OpenBLAS/AVX2: what a CPU without AVX-512F
# runs). KEEL_NO_AVX512=1 forces them on this machine; the tensor, graph and
# ONNX unit tests (naive references, 1 vs 2 threads) must hold on them too.
# (onnx_models.py runs the PyTorch-exported models on both paths.)
. "$KEEL_SRC/tests/integration/lib.sh"
unit="$KEEL_SRC/${BUILD:-build}/keel-unit"
if KEEL_NO_AVX512=1 "$unit" tensor graph onnx > "$T/unit.log" 2>&1; then
  pass tensor_no_avx512_unit "$(tail -n 1 "$T/unit.log")"
else
  fail tensor_no_avx512_unit "$(grep -m 3 FAIL "$T/unit.log")"
fi
