#!/usr/bin/python3
"""Writes benchmark inputs for bench/onnx: OUT/<model>_b<B>/<input>.npy for
the parity models (same shapes as tests/onnx/export_models.py)."""
import os
import sys

import numpy as np

out, model, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(1)
d = os.path.join(out, "%s_b%d" % (model, batch))
os.makedirs(d, exist_ok=True)
if model == "mlp":
    arrs = {"x": rng.standard_normal((batch, 784), dtype=np.float32)}
elif model in ("resnet18", "mobilenet_v2"):
    arrs = {"x": rng.standard_normal((batch, 3, 224, 224), dtype=np.float32)}
elif model == "lstm":  # 32 steps of 32 features
    arrs = {"x": rng.standard_normal((batch, 32, 32), dtype=np.float32)}
elif model == "gru_lm":  # 32 tokens
    arrs = {"tokens": rng.integers(0, 500, (batch, 32)).astype(np.int64)}
else:
    mask = np.zeros((batch, 16), dtype=bool)
    mask[:, 12:] = True
    arrs = {"x": rng.standard_normal((batch, 16, 64), dtype=np.float32), "mask": mask}
for k, v in arrs.items():
    np.save(os.path.join(d, k + ".npy"), v)
print(" ".join("%s=%s" % (k, os.path.join(d, k + ".npy")) for k in arrs))
