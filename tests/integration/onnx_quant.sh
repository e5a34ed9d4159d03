#!/usr/bin/env bash
# Quantized graphs: ResNet-18 and MobileNetV2 (the exported fp32 parity
# models) quantized to ONNX Runtime's QDQ form by bench/onnx/qdq_quantize.py
# (per-channel int8 weights, calibrated uint8 activations), run by keel at
# batch 1 and 2, on the default kernels (VNNI where the CPU has it), with
# KEEL_NO_AVX512=1 (the AVX2 int8 GEMM) and at 1 thread. The QDQ pass must
# fuse every Conv, Gemm and Add into int8 ops; the uint8 feature map in front
# of the global average pool (integer ops only from the input's Q on) must be
# bit-identical to the NumPy reference of the fused int8 semantics
# (qdq_quantize.py --reference: int32 sums, float32 requantization as ONNX
# Runtime's QLinearConv), the dequantized logits within one output quantum
# of it (the float average pool may differ in its last bit), and within 5 %
# of the largest logit of PyTorch's fp32 output.
. "$KEEL_SRC/tests/integration/lib.sh"
B="$KEEL_SRC/${BUILD:-build}"
models="$B/onnx-models"
if ! $PYTHON "$KEEL_SRC/tests/onnx/export_models.py" "$models" resnet18 mobilenet_v2 > "$T/export.log" 2>&1; then
  fail onnx_quant_export "$(tail -c 400 "$T/export.log")"
  exit 1
fi
for m in resnet18 mobilenet_v2; do
  q="$T/$m.qdq.onnx"
  if ! $PYTHON "$KEEL_SRC/bench/onnx/qdq_quantize.py" "$models/$m/model.onnx" "$q" --calib 2 --extra-output \
      > "$T/q.log" 2>&1; then
    fail "onnx_quant_${m}_quantize" "$(tail -c 400 "$T/q.log")"
    continue
  fi
  # the fusion: no float Conv/Gemm/Add left
  KEEL_PROFILE=1 "$KEEL" run "$q" -i "x=$models/$m/b1/x.npy" -o "$T/prof" > /dev/null 2> "$T/prof.log"
  if grep -q "^QLinearConv" "$T/prof.log" && ! grep -E -q "^(Conv|Gemm|Add) " "$T/prof.log"; then
    pass "onnx_quant_${m}_fused"
  else
    fail "onnx_quant_${m}_fused" "$(grep -E '^[A-Z][A-Za-z]+ +[0-9]' "$T/prof.log" | tr '\n' ';' | head -c 400)"
  fi
  for b in b1 b2; do
    x="$models/$m/$b/x.npy"
    if ! $PYTHON "$KEEL_SRC/bench/onnx/qdq_quantize.py" --reference "$q" "$x" "$T/ref_$m$b" > "$T/r.log" 2>&1; then
      fail "onnx_quant_${m}_${b}_reference" "$(tail -c 400 "$T/r.log")"
      continue
    fi
    for mode in default noavx512 1t; do
      out="$T/out_$m$b$mode"
      case $mode in
        default) "$KEEL" run "$q" -i "x=$x" -o "$out" > /dev/null 2> "$T/run.err" ;;
        noavx512) KEEL_NO_AVX512=1 "$KEEL" run "$q" -i "x=$x" -o "$out" > /dev/null 2> "$T/run.err" ;;
        1t) "$KEEL" run "$q" -i "x=$x" -o "$out" --threads 1 > /dev/null 2> "$T/run.err" ;;
      esac
      if [ $? -ne 0 ]; then
        fail "onnx_quant_${m}_${b}_$mode" "keel run: $(head -c 400 "$T/run.err")"
        continue
      fi
      check "onnx_quant_${m}_${b}_$mode" $PYTHON - "$q" "$out" "$T/ref_$m$b" "$models/$m/$b/expected_y.npy" <<'PY'
import os, sys
import numpy as np
import onnx
from onnx import numpy_helper
model, out, ref, fp32 = sys.argv[1:]
m = onnx.load(model)
inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
y_name, f_name = m.graph.output[0].name, m.graph.output[1].name
file = lambda n: n.replace("/", "_").replace(":", "_") + ".npy"
fk, fr = np.load(os.path.join(out, file(f_name))), np.load(os.path.join(ref, file(f_name)))
if fk.dtype != np.uint8 or not np.array_equal(fk, fr):
    sys.exit("features: %d of %d differ from the int8 reference" % ((fk != fr).sum(), fr.size))
yq = [n for n in m.graph.node if n.output[0] == y_name][0]  # the last DequantizeLinear
quantum = float(inits[yq.input[1]])
yk, yr, yf = np.load(os.path.join(out, file(y_name))), np.load(os.path.join(ref, file(y_name))), np.load(fp32)
d = np.abs(yk.astype(np.float64) - yr).max()
if d > quantum * 1.0001:
    sys.exit("logits: %g from the int8 reference (one quantum %g)" % (d, quantum))
e = np.abs(yk.astype(np.float64) - yf).max() / np.abs(yf).max()
if e > 0.05:
    sys.exit("logits: %.3g of the largest fp32 logit from PyTorch (bound 0.05)" % e)
print("features identical, logits %g from the reference, %.4f relative to fp32" % (d, e))
PY
    done
  done
done
