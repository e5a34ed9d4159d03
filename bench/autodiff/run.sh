#!/bin/sh
# Training step (forward + autodiff backward, no optimizer) through keel's
# graph executor vs PyTorch 1.13 forward + backward, same models, batches and
# threads, alternating in one run (the machine is shared: compare the ratios).
# Builds bench/autodiff/autodiff_bench.c against build/libkeel.a.
# Env: ITERS (default 30), MODEL (mlp|cnn|all), THREADS (default "1 2").
set -e
cd "$(dirname "$0")/../.."
PKGS="openblas libcrypto yaml-0.1 libcjson libzstd snappy zlib liblz4 libbrotlidec libturbojpeg libpng libcurl libmicrohttpd sqlite3 libprotobuf-c"
cc -O2 -march=x86-64-v3 -std=c11 -D_GNU_SOURCE -pthread -Iinclude bench/autodiff/autodiff_bench.c build/libkeel.a \
   $(pkg-config --libs $PKGS 2>/dev/null) -lm -ldl -o build/autodiff_bench
for t in ${THREADS:-1 2}; do
  build/autodiff_bench $t "${ITERS:-30}" "${MODEL:-all}" 2>/dev/null
  [ -n "$NO_TORCH" ] || /usr/bin/python3 bench/autodiff/torch_step.py $t "${ITERS:-30}"
done
