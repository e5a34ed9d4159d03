#!/bin/sh
# Builds and runs bench/autodiff/autodiff_bench.c against build/libkeel.a:
# training-step speed through the graph executor at 1 and 2 threads.
set -e
cd "$(dirname "$0")/../.."
PKGS="openblas libcrypto yaml-0.1 libcjson libzstd snappy zlib liblz4 libturbojpeg libpng libcurl libmicrohttpd sqlite3 libprotobuf-c"
cc -O2 -march=x86-64-v3 -std=c11 -D_GNU_SOURCE -pthread -Iinclude bench/autodiff/autodiff_bench.c build/libkeel.a \
   $(pkg-config --libs $PKGS 2>/dev/null) -lm -ldl -o build/autodiff_bench
for t in 1 2; do build/autodiff_bench $t "${ITERS:-30}" "${MODEL:-all}"; done
