#!/usr/bin/env python3
"""Gradients of whole graphs through keel's autodiff (kl_graph_autodiff +
the executor, driven by build/autodiff-tool) against PyTorch 1.13 autograd:
(1) a CNN conv(pad 1)-BatchNorm(train)-relu-maxpool-conv(stride 2)-relu-
global average pool-linear-cross-entropy(label smoothing 0.1), including the
BatchNorm running statistics; (2) an MLP linear-LayerNorm-GELU(erf, as the
trainer emits it)-linear-weighted cross-entropy, with the input gradient too.
float64: loss and every gradient within 1e-7 relative (ONNX float attributes:
epsilon and momentum are float32), float32: 1e-4."""
import os
import subprocess
import sys
import tempfile

BUILD = os.environ.get("BUILD", "build")
TOOL = os.path.join(os.environ.get("KEEL_SRC", "."), BUILD, "autodiff-tool")
TMP = tempfile.mkdtemp(dir=os.environ.get("KEEL_TEST_TMP"))


def out(ok, name, why=""):
    print(("PASS " + name) if ok else ("FAIL %s: %s" % (name, why)), flush=True)


try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except Exception as ex:  # a missing dependency is a failure, not a skip
    out(False, "autodiff_torch_deps", "python3-torch / python3-numpy needed: %s" % ex)
    sys.exit(0)

torch.set_num_threads(1)


def cnn(dt):
    g = torch.Generator().manual_seed(7)
    r = lambda *s, sc=1.0, sh=0.0: (torch.rand(*s, generator=g, dtype=torch.float64) * 2 - 1) * sc + sh
    t = {"x": r(4, 3, 8, 8), "W1": r(8, 3, 3, 3, sc=0.4), "b1": r(8, sc=0.1), "gs": r(8, sc=0.2, sh=1), "gb": r(8, sc=0.2),
         "rm": r(8, sc=0.1), "rv": r(8, sc=0.1, sh=1), "W2": r(16, 8, 3, 3, sc=0.2), "b2": r(16, sc=0.1), "Wf": r(10, 16, sc=0.5),
         "bf": r(10, sc=0.1)}
    t = {k: v.to(dt) for k, v in t.items()}
    y = torch.randint(0, 10, (4,), generator=g)
    params = ["W1", "b1", "gs", "gb", "W2", "b2", "Wf", "bf"]
    for k in params:
        t[k].requires_grad_(True)
    rm, rv = t["rm"].clone(), t["rv"].clone()
    h = F.conv2d(t["x"], t["W1"], t["b1"], padding=1)
    h = F.batch_norm(h, rm, rv, t["gs"], t["gb"], training=True, momentum=0.1, eps=1e-5)
    h = F.max_pool2d(F.relu(h), 2)
    h = F.relu(F.conv2d(h, t["W2"], t["b2"], stride=2, padding=1))
    z = F.linear(h.mean(dim=(2, 3)), t["Wf"], t["bf"])
    loss = F.cross_entropy(z, y, label_smoothing=0.1)
    loss.backward()
    ref = {"loss": loss.detach(), "rm_out": rm, "rv_out": rv}
    ref.update({k + "_grad": t[k].grad for k in params})
    inputs = {k: v.detach() for k, v in t.items()}
    inputs["y"] = y
    return inputs, ref


def mlp(dt):
    g = torch.Generator().manual_seed(11)
    r = lambda *s, sc=1.0, sh=0.0: (torch.rand(*s, generator=g, dtype=torch.float64) * 2 - 1) * sc + sh
    t = {"x": r(6, 20), "W1": r(32, 20, sc=0.3), "b1": r(32, sc=0.1), "ls": r(32, sc=0.2, sh=1), "lb": r(32, sc=0.2),
         "W2": r(5, 32, sc=0.3), "b2": r(5, sc=0.1), "cw": r(5, sc=0.4, sh=1)}
    t = {k: v.to(dt) for k, v in t.items()}
    y = torch.randint(0, 5, (6,), generator=g)
    params = ["x", "W1", "b1", "ls", "lb", "W2", "b2"]
    for k in params:
        t[k].requires_grad_(True)
    h = F.layer_norm(F.linear(t["x"], t["W1"], t["b1"]), (32,), t["ls"], t["lb"], eps=1e-5)
    z = F.linear(F.gelu(h), t["W2"], t["b2"])
    loss = F.cross_entropy(z, y, weight=t["cw"])
    loss.backward()
    ref = {"loss": loss.detach()}
    ref.update({k + "_grad": t[k].grad for k in params})
    inputs = {k: v.detach() for k, v in t.items()}
    inputs["y"] = y
    return inputs, ref


for model, build in (("cnn", cnn), ("mlp", mlp)):
    for dt, tol in ((torch.float64, 1e-7), (torch.float32, 1e-4)):
        name = "autodiff_torch_%s_%s" % (model, "f64" if dt == torch.float64 else "f32")
        d = os.path.join(TMP, name)
        os.makedirs(d)
        inputs, ref = build(dt)
        for k, v in inputs.items():
            np.save(os.path.join(d, k + ".npy"), v.numpy())
        p = subprocess.run([TOOL, model, d], capture_output=True, text=True)
        if p.returncode != 0:
            out(False, name, "autodiff-tool exited %d: %s" % (p.returncode, p.stderr.strip()[-500:]))
            continue
        bad = []
        for k, v in ref.items():
            f = os.path.join(d, "keel_%s.npy" % k)
            if not os.path.exists(f):
                bad.append("%s missing" % k)
                continue
            a, b = np.load(f).astype(np.float64), v.detach().numpy().astype(np.float64)
            if a.shape != b.shape:
                bad.append("%s shape %s vs %s" % (k, a.shape, b.shape))
                continue
            err = float(np.max(np.abs(a - b))) if a.size else 0.0
            scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-3)
            if not err <= tol * scale:
                bad.append("%s max error %.3g (scale %.3g)" % (k, err, scale))
        out(not bad, name, "; ".join(bad))
