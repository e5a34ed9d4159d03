#!/usr/bin/python3
"""Image transforms against OpenCV (python3-opencv): keel's undistortion
against cv2.undistort and its area resize against cv2.resize(INTER_AREA),
through the build/image-tool driver."""
import os
import subprocess
import sys

try:
    import numpy as np
    import cv2
except ImportError as ex:
    print(f"FAIL loader_cv2: python3-opencv / numpy missing ({ex}); run make deps")
    sys.exit(1)

BUILD = os.environ.get("BUILD", "build")
TOOL = os.path.join(os.environ.get("KEEL_SRC", "."), BUILD, "image-tool")


def tool(args, img):
    p = subprocess.run([TOOL] + [str(a) for a in args], input=img.tobytes(), capture_output=True)
    if p.returncode:
        raise RuntimeError(p.stderr.decode())
    return p.stdout


def image(w, h, seed):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([(xx * 3 + yy) % 256, (xx * yy // 7) % 256, rng.integers(0, 256, (h, w))], axis=-1)
    return np.ascontiguousarray(img.astype(np.uint8))


fails = 0


def check(name, ok, why):
    global fails
    if ok:
        print(f"PASS {name}")
    else:
        fails += 1
        print(f"FAIL {name}: {why}")


for (w, h, cam) in [(160, 120, (150.0, 140.0, 79.5, 61.0, -0.3, 0.08, 0.0012, -0.0008)),
                    (97, 64, (80.0, 80.0, 48.0, 32.0, 0.12, -0.02, -0.002, 0.003))]:
    img = image(w, h, w)
    fx, fy, cx, cy, k1, k2, p1, p2 = cam
    K = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1]], dtype=np.float64)
    ref = cv2.undistort(img, K, np.array([k1, k2, p1, p2], dtype=np.float64))
    got = np.frombuffer(tool(["undistort", w, h, 3] + list(cam), img), dtype=np.uint8).reshape(h, w, 3)
    d = np.abs(got.astype(int) - ref.astype(int))
    check(f"loader_cv2_undistort_{w}x{h}", d.max() <= 1 and (d > 0).mean() < 0.01,
          f"max |diff| {d.max()}, {100 * (d > 0).mean():.2f}% of values differ")

for (w, h, dw, dh) in [(256, 256, 224, 224), (640, 480, 64, 48), (101, 77, 40, 30)]:
    img = image(w, h, dw)
    ref = cv2.resize(img, (dw, dh), interpolation=cv2.INTER_AREA)
    got = np.frombuffer(tool(["resize", w, h, 3, dw, dh], img), dtype=np.uint8).reshape(dh, dw, 3)
    d = np.abs(got.astype(int) - ref.astype(int))
    check(f"loader_cv2_resize_area_{w}x{h}_{dw}x{dh}", d.max() <= 1, f"max |diff| {d.max()}")

sys.exit(1 if fails else 0)
