#!/usr/bin/env python3
"""The MLP the serve benchmarks share: writes REPO/mlp/1/model.onnx (the
784-512-512-10 MLP of tests/integration/serve/helpers.py, seed 0) for each
REPO and WORKDIR/body.json, the KServe v2 request (1x784 FP32, values
printed with 6 significant digits, "id" unless --id ''). The caller writes
each repository's config.yaml.
Usage: mlp_setup.py WORKDIR REPO... [--id ID]   (env KEEL_SRC: the source tree)"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.environ.get("KEEL_SRC", "."), "tests/integration/serve"))
from helpers import write_mlp  # noqa: E402
import numpy as np  # noqa: E402

args = sys.argv[1:]
rid = "bench"
if "--id" in args:
    i = args.index("--id")
    rid = args[i + 1]
    del args[i:i + 2]
work, repos = args[0], args[1:]
for r in repos:
    write_mlp(os.path.join(r, "mlp", "1", "model.onnx"), seed=0)
x = np.random.default_rng(0).standard_normal((1, 784)).astype(np.float32)
req = {"id": rid} if rid else {}
req["inputs"] = [{"name": "x", "datatype": "FP32", "shape": [1, 784], "data": [float("%.6g" % v) for v in x.ravel()]}]
with open(os.path.join(work, "body.json"), "w") as f:
    json.dump(req, f)
