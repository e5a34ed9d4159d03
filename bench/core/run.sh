#!/usr/bin/env bash
# Core benchmarks: allocator allocs/s vs glibc malloc.
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
mkdir -p "$BUILD/bench"
gcc -O2 -std=c11 -D_GNU_SOURCE -pthread -Iinclude bench/core/mem_bench.c "$BUILD/libkeel.a" \
  $(pkg-config --libs libcrypto yaml-0.1 libcjson) -lm -o "$BUILD/bench/mem_bench"
"$BUILD/bench/mem_bench"
