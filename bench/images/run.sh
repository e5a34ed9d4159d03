#!/usr/bin/env bash
# Image benchmarks: (1) JPEG decode MPix/s of kl_image_decode vs TurboJPEG's
# own tjbench (Debian libjpeg-turbo-progs) and vs TurboJPEG called in the
# same process (alternating 50 ms slices), on the same files, one thread,
# RGB output, accurate DCT, full size and DCT-scaled 1/4, medians of rounds; (2) keel datagen defects and keel pack rates
# (wall and CPU seconds per image, since the machine is shared).
# N (default 2000) images for datagen/pack; ROUNDS (default 3).
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
KEEL=${KEEL:-$PWD/$BUILD/keel}
N=${N:-2000}; ROUNDS=${ROUNDS:-3}
out=$BUILD/bench/images; rm -rf "$out"; mkdir -p "$out"
command -v tjbench >/dev/null || { echo "tjbench missing: apt-get install libjpeg-turbo-progs (make deps)"; exit 1; }
gcc -O2 -std=c11 -D_GNU_SOURCE -pthread -Iinclude bench/images/decode_bench.c "$BUILD/libkeel.a" \
  $(pkg-config --libs libturbojpeg libpng libcrypto yaml-0.1 libcjson zlib) -lm -o "$out/decode_bench"

# --- datagen and pack rates
"$KEEL" datagen defects --out "$out/src" --n "$N" --size 256 --seed 1 --threads 2 --json > "$out/datagen.json"
/usr/bin/time -f "%U %S" -o "$out/datagen1.time" "$KEEL" datagen defects --out "$out/src1" --n 600 --size 256 --seed 1 --threads 1 --json > "$out/datagen1.json"
"$KEEL" pack "$out/src" --out "$out/shards" --threads 2 --json > "$out/pack.json"
"$KEEL" datagen defects --out "$out/big" --n 3 --size 1024 --seed 2 --threads 1 >/dev/null
python3 - "$out" <<'PY'
import json, sys
o = sys.argv[1]
d = json.load(open(o + '/datagen.json')); d1 = json.load(open(o + '/datagen1.json')); p = json.load(open(o + '/pack.json'))
u, s = map(float, open(o + '/datagen1.time').read().split())
print(f"datagen 256x256: {d['images']} images in {d['seconds']:.1f} s on {d['threads']} threads = {d['images_per_s']:.0f} images/s; "
      f"1 thread: {d1['images_per_s']:.0f} images/s wall, {(u + s) / d1['images'] * 1000:.2f} ms CPU/image")
print(f"pack: {p['records']} images in {p['seconds']:.2f} s on {p['threads']} threads = {p['images_per_s']:.0f} images/s wall, "
      f"{p['cpu_seconds'] / p['records'] * 1000:.2f} ms CPU/image, {p['bytes_in'] / 2**20:.1f} MiB in, {p['bytes_out'] / 2**20:.1f} MiB out")
PY

# --- decode MPix/s: keel vs TurboJPEG in-process (alternating slices), and tjbench, interleaved rounds
files="$out/src/good/000000.jpg $out/src/scratch/000001.jpg $out/src/dent/000002.jpg $out/big/good/000000.jpg $out/big/scratch/000001.jpg"
: > "$out/decode.txt"
for r in $(seq 1 "$ROUNDS"); do
  for f in $files; do
    kr=$("$out/decode_bench" --secs 1 "$f" | awk '{print $4, $5}')
    k4=$("$out/decode_bench" --secs 1 --scale 4 "$f" | awk '{print $4, $5}')
    t=$(tjbench "$f" -rgb -nowrite -benchtime 1 -warmup 0.2 2>&1 | awk '/Throughput/ {print $2; exit}')
    t4=$(tjbench "$f" -rgb -nowrite -benchtime 1 -warmup 0.2 -scale 1/4 2>&1 | awk '/Throughput/ {print $2; exit}')
    echo "$f $kr $t $k4 $t4" >> "$out/decode.txt"
  done
done
python3 - "$out/decode.txt" <<'PY'
import sys, statistics as st, collections, re
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f, *v = line.split(); rows[f].append([float(x) for x in v])
print("| file | scale | keel MPix/s | TurboJPEG in-process | keel / in-process | tjbench | keel / tjbench |")
print("|---|---|---|---|---|---|---|")
for f, v in rows.items():
    m = [st.median(x[j] for x in v) for j in range(6)]
    name = re.sub(r'.*/(src|big)/', lambda g: ('256px ' if g.group(1) == 'src' else '1024px '), f)
    print(f"| {name} | 1 | {m[0]:.1f} | {m[1]:.1f} | {m[0] / m[1]:.2f} | {m[2]:.1f} | {m[0] / m[2]:.2f} |")
    print(f"| {name} | 1/4 | {m[3]:.1f} | {m[4]:.1f} | {m[3] / m[4]:.2f} | {m[5]:.1f} | {m[3] / m[5]:.2f} |")
PY
