#!/usr/bin/env bash
# Kernel benchmarks: SGEMM vs OpenBLAS's own threading, conv layers of
# ResNet-18 and MobileNetV2 at 1 and 2 threads, NCHWc vs NCHW per ResNet-18
# layer. ITERS=n to change medians. Usage: run.sh [gemm|conv|nchwc|mobile|wino|all] [batch]
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
mkdir -p "$BUILD/bench"
if [ "${1:-}" = layer ]; then # one dense NCHWc layer, hot or cold weights: run.sh layer C M H k s batch threads iters cold
  shift
  gcc -O2 -std=c11 -D_GNU_SOURCE -pthread -march=x86-64-v3 -Iinclude bench/kernels/layer_bench.c "$BUILD/libkeel.a" \
    $(pkg-config --libs openblas libcrypto yaml-0.1 libcjson libzstd) -lm -o "$BUILD/bench/layer_bench"
  exec "$BUILD/bench/layer_bench" "$@"
fi
if [ "${1:-}" = split ]; then # depth-first prefix off vs on (exec.c), one model: run.sh split MODEL.onnx batch iters [mode]
  shift
  gcc -O2 -std=c11 -D_GNU_SOURCE -pthread -march=x86-64-v3 -Iinclude bench/kernels/split_bench.c "$BUILD/libkeel.a" \
    $(pkg-config --libs openblas libcrypto yaml-0.1 libcjson libzstd snappy zlib liblz4 libbrotlidec libprotobuf-c) -lm -o "$BUILD/bench/split_bench"
  exec "$BUILD/bench/split_bench" "$@"
fi
gcc -O2 -std=c11 -D_GNU_SOURCE -pthread -march=x86-64-v3 -Iinclude bench/kernels/kernel_bench.c "$BUILD/libkeel.a" \
  $(pkg-config --libs openblas libcrypto yaml-0.1 libcjson) -lm -o "$BUILD/bench/kernel_bench"
"$BUILD/bench/kernel_bench" "${1:-all}" "${ITERS:-9}" "${2:-1}"
