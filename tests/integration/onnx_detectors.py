#!/usr/bin/python3
"""Detection parity: torchvision's ssdlite320_mobilenet_v3_large,
fasterrcnn_mobilenet_v3_large_320_fpn and maskrcnn_resnet50_fpn exported by
PyTorch 1.13 (tests/onnx/export_detectors.py: seeded random weights,
BatchNorm statistics and the heads' layers standardised on the image so that
the detections are many and distinct in score; exports cached in
$BUILD/onnx-detectors) are run by `keel run` and compared with PyTorch's
detections: the same number, the same labels in the same order, boxes within
1e-4 of the image size, scores within 1e-4; Mask R-CNN's masks within 5e-3
(they are pasted by bilinear interpolation at the box corners: a corner
1e-3 px off moves a steep edge) with at most 0.01 % of the pixels on the
other side of 0.5. Mask R-CNN runs twice: with KEEL_WINO=0 at those bounds,
and on the default kernels, whose Winograd 3x3 convolutions round more
(ResNet-50's 3x3 layers; 1.6e-4 measured, ONNX Runtime 3.3e-5), at scores
within 3e-4. The export is checked too: at least 5 detections whose scores
differ pairwise by more than 1e-5 (else their order is not defined and the
test would be vacuous)."""
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


def compare(name, d, out, score_tol):
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
    if se > score_tol:
        return "scores differ by %.3g (bound %.3g)" % (se, score_tol)
    if "masks" in want:
        me = float(np.max(np.abs(got["masks"] - want["masks"])))
        flips = float(np.mean((got["masks"] > 0.5) != (want["masks"] > 0.5)))
        if me > 5e-3 or flips > 1e-4:
            return "masks differ by %.3g, %.3g %% of pixels across 0.5" % (me, 100 * flips)
    print("PASS %s (%d detections, boxes %.2g px, scores %.2g)" % (name, len(s), be, se))
    return None


runs = [(n, {}, 1e-4) for n in names if n != "maskrcnn"]
if "maskrcnn" in names:
    runs += [("maskrcnn", {"KEEL_WINO": "0"}, 1e-4), ("maskrcnn", {}, 3e-4)]
ok = True
for name, env, tol in runs:
    d = os.path.join(models, name)
    test = "onnx_detector_%s%s" % (name, "_nowino" if env else "")
    out = os.path.join(tmp, test)
    cmd = [keel, "run", os.path.join(d, "model.onnx"), "--input", "x=" + os.path.join(d, "x.npy"), "--output-dir", out]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **env))
    if r.returncode != 0:
        print("FAIL %s: keel run exited %d: %s" % (test, r.returncode, r.stderr[-300:].replace("\n", " ")))
        ok = False
        continue
    why = compare(test, d, out, tol)
    if why:
        print("FAIL %s: %s" % (test, why))
        ok = False
sys.exit(0 if ok else 1)
