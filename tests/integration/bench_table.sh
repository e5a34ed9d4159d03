# The table of current benchmark results in bench/README.md is generated from
# bench/results/*.json (tools/bench_table.py): it is fresh, and `update` takes
# a new ratio from an area's output (lines as the bench scripts print them),
# stamps date and machine, keeps the rows it cannot find, and `render` puts
# the new value in the table.
. "$KEEL_SRC/tests/integration/lib.sh"
tool="$KEEL_SRC/tools/bench_table.py"
check bench_table_fresh $PYTHON "$tool" check
# every record has the fields the table needs and a unique order
if $PYTHON - "$KEEL_SRC/bench/results" > "$T/rec.out" 2>&1 <<'PY'
import glob, json, sys
recs = [json.load(open(p)) for p in sorted(glob.glob(sys.argv[1] + "/*.json"))]
need = ("id", "order", "area", "what", "peer", "ratio", "unit", "machine", "date", "command", "source")
bad = [r.get("id") for r in recs if any(k not in r for k in need)]
orders = [r["order"] for r in recs]
sys.exit("missing fields: %s" % bad if bad else ("duplicate order" if len(set(orders)) != len(orders) else 0))
PY
then pass bench_records_complete; else fail bench_records_complete "$(cat "$T/rec.out")"; fi

w="$T/b"
mkdir -p "$w/bench"
cp -r "$KEEL_SRC/bench/results" "$w/bench/"
cp "$KEEL_SRC/bench/README.md" "$w/bench/"
cat > "$T/onnx.out" <<'OUT'
| model | batch | threads | keel p50 ms | ORT p50 ms | keel/ORT |
|---|---|---|---|---|---|
| resnet18 | 1 | 1 | 12.000 | 20.000 | 0.60 |
| resnet18 | 1 | 2 | 8.000 | 10.000 | 0.80 |
OUT
$PYTHON "$tool" update onnx "$T/onnx.out" --root "$w" > "$T/upd.out" 2>&1
r=$($PYTHON -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["ratio"], d["source"][:10], d["date"] != "2026-11-30")' "$w/bench/results/onnx-resnet18-b1-1t.json")
if [ "$r" = "0.6 make bench True" ] && grep -q 'kept (not found in the output of bench/onnx): .*onnx-resnet18-b32-1t' "$T/upd.out"; then
  pass bench_update_takes_ratio_keeps_missing
else fail bench_update_takes_ratio_keeps_missing "$r; $(head -c 300 "$T/upd.out")"; fi
# two-value rows: keel and peer ms/step, ratio = peer / keel
printf 'threads 1\nmlp  784-512-512-10 b128: 5.000 ms/step  25600 samples/s\ntorch mlp b128: 15.000 ms/step  8533 samples/s\n' > "$T/ad.out"
$PYTHON "$tool" update autodiff "$T/ad.out" --root "$w" > /dev/null 2>&1
r=$($PYTHON -c 'import json,sys; print(json.load(open(sys.argv[1]))["ratio"])' "$w/bench/results/autodiff-mlp-1t.json")
[ "$r" = 3.0 ] && pass bench_update_two_values || fail bench_update_two_values "ratio $r, expected 3.0"
# the formats of bench/core, bench/train and bench/serve
printf 'threads  max size    keel allocs/s malloc allocs/s    ratio\n1        1048576           8621556        1362181     6.33\n' > "$T/core.out"
printf 'model    thr      keel_sps    torch_sps   ratio   sgemm_gflops\nmlp      1           28256         6907    4.09           97.1\n' > "$T/train.out"
printf 'ratio keel/fastapi req/s: 19.7x (load average 1.0 1.1 1.2)\n' > "$T/serve.out"
for a in core train serve; do $PYTHON "$tool" update $a "$T/$a.out" --root "$w" > /dev/null 2>&1; done
got=$($PYTHON -c 'import json,sys; print(*[json.load(open(sys.argv[1] + "/" + f + ".json"))["ratio"] for f in ("core-alloc-1mib", "train-mlp-1t", "serve-mlp-json")])' "$w/bench/results")
[ "$got" = "6.33 4.09 19.7" ] && pass bench_update_script_formats || fail bench_update_script_formats "got $got"
$PYTHON "$tool" check --root "$w" > /dev/null 2>&1 && fail bench_check_sees_stale "check passed on stale table" || pass bench_check_sees_stale
$PYTHON "$tool" render --root "$w"
if grep -q '| ResNet-18 inference, batch 1, 1 thread, median latency | onnx | ONNX Runtime 1.30 (CPU) | \*\*0.60\*\* × latency' "$w/bench/README.md" \
   && $PYTHON "$tool" check --root "$w"; then pass bench_render_writes_table
else fail bench_render_writes_table "$(grep -m1 'ResNet-18 inference, batch 1, 1 thread' "$w/bench/README.md")"; fi
rm -rf "$w"
