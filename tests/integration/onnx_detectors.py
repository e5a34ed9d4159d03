#!/usr/bin/python3
"""Detection parity: torchvision's ssdlite320_mobilenet_v3_large,
fasterrcnn_mobilenet_v3_large_320_fpn and maskrcnn_resnet50_fpn exported by
PyTorch 1.13 (tests/onnx/export_detectors.py: seeded random weights, score
layers standardised so that the detections are many and distinct in score;
exports cached in $BUILD/onnx-detectors) are run by `keel run` and compared
with PyTorch's detections: the same number, the same labels in the same
order, boxes within 1e-4 of the image size, scores within 1e-4, Mask R-CNN's
masks within 1e-3 (and at most 0.1 % of the pixels on the other side of 0.5).
The export is checked too: at least 5 detections whose scores differ
pairwise by more than 1e-5 (else their order is not defined and the test
would be vacuous)."""
import os
import subprocess
import sys
import tempfile

import numpy as np

src = os.environ.get("KEEL_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
build = os.path.join(src, os.environ.get("BUILD", "build"))
keel = os.environ.get("KEEL", os.path.join(build, "keel"))
models = os.path.join(build, "onnx-detectors")
tmp = tempfile.mkdtemp(dir=os.environ.get("KEEL_TEST_TMP"))
names = os.environ.get("DETECTORS", "ssdlite fasterrcnn maskrcnn").split()

r = subprocess.run([sys.executable, os.path.join(src, "tests/onnx/export_detectors.py"), models] + names,
                   capture_output=True, text=True)
if r.returncode != 0:
    print("FAIL onnx_detectors_export: " + (r.stderr or r.stdout)[-400:].replace("\n", " "))
    sys.exit(1)


def compare(name, d, out):
    """The first difference between keel's outputs in out and PyTorch's in d, or None."""
    x = np.load(os.path.join(d, "x.npy"))
    want = {k: np.load(os.path.join(d, "expected_%s.npy" % k)) for k in ["boxes", "scores", "labels", "masks"]
            if os.path.exists(os.path.join(d, "expected_%s.npy" % k))}
    s = want["scores"]
    if len(s) < 5 or np.min(np.abs(s[:, None] - s[None, :]) + np.eye(len(s))) <= 1e-5:
        return "export: %d detections, scores not pairwise distinct by 1e-5" % len(s)
    got = {k: np.load(os.path.join(out, k + ".npy")) for k in want}
    if got["boxes"].shape != want["boxes"].shape:
        return "%d detections, expected %d" % (len(got["scores"]), len(s))
    if not np.array_equal(got["labels"], want["labels"]):
        return "labels %s, expected %s" % (got["labels"].tolist(), want["labels"].tolist())
    be = float(np.max(np.abs(got["boxes"] - want["boxes"])))
    if be > 1e-4 * max(x.shape[1:]):
        return "boxes differ by %.3g px" % be
    se = float(np.max(np.abs(got["scores"] - s)))
    if se > 1e-4:
        return "scores differ by %.3g" % se
    if "masks" in want:
        me = float(np.max(np.abs(got["masks"] - want["masks"])))
        flips = float(np.mean((got["masks"] > 0.5) != (want["masks"] > 0.5)))
        if me > 1e-3 or flips > 1e-3:
            return "masks differ by %.3g, %.3g %% of pixels across 0.5" % (me, 100 * flips)
    print("PASS onnx_detector_%s (%d detections, boxes %.2g px, scores %.2g)" % (name, len(s), be, se))
    return None


ok = True
for name in names:
    d = os.path.join(models, name)
    out = os.path.join(tmp, name)
    cmd = [keel, "run", os.path.join(d, "model.onnx"), "--input", "x=" + os.path.join(d, "x.npy"), "--output-dir", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL onnx_detector_%s: keel run exited %d: %s" % (name, r.returncode, r.stderr[-300:].replace("\n", " ")))
        ok = False
        continue
    why = compare(name, d, out)
    if why:
        print("FAIL onnx_detector_%s: %s" % (name, why))
        ok = False
sys.exit(0 if ok else 1)
