#!/usr/bin/env python3
"""PyTorch 1.13 parity of keel train: the same architecture, the same initial
weights (written by PyTorch as safetensors, read by keel's train.init), the
same batches (no shuffle, no validation split): gradients before the first
step agree, and the losses of 20 AdamW steps and of 20 SGD+momentum (nesterov,
weight decay) steps agree within 1e-4 relative. Also checks the exported
model.onnx run by `keel run` against keel's eval forward within 1e-6."""
import json
import os
import struct
import subprocess
import sys
import tempfile

KEEL = os.environ.get("KEEL", "build/keel")
TMP = tempfile.mkdtemp(dir=os.environ.get("KEEL_TEST_TMP"))


def out(ok, name, why=""):
    print(("PASS " + name) if ok else ("FAIL %s: %s" % (name, why)), flush=True)


try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except Exception as ex:  # a missing dependency is a failure, not a skip
    out(False, "train_parity_deps", "python3-torch / python3-numpy needed: %s" % ex)
    sys.exit(0)

torch.set_num_threads(1)


def st_write(path, tensors):
    hdr, off, blobs = {}, 0, []
    for k, v in tensors.items():
        a = np.ascontiguousarray(v.detach().numpy().astype(np.float32))
        hdr[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def st_read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    res = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        res[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.float32).reshape(v["shape"])
    return res


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.fc1 = nn.Linear(6 * 4 * 4, 32)
        self.ln = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.c1(x))), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.gelu(self.ln(self.fc1(x))))


SPEC = """seed: 5
input: {shape: [1, 8, 8]}
layers:
  - {type: conv2d, out: 6, kernel: 3, padding: 1, name: c1}
  - {type: batchnorm2d, name: bn}
  - {type: relu}
  - {type: maxpool2d, kernel: 2}
  - {type: flatten}
  - {type: linear, out: 32, name: fc1}
  - {type: layernorm, name: ln}
  - {type: gelu}
  - {type: linear, out: 10, name: fc2}
loss: {type: cross_entropy, label_smoothing: 0.1, class_weights: [1, 1.5, 1, 1, 0.5, 1, 1, 2, 1, 1]}
optimizer: %s
train: {epochs: 100, batch_size: 32, val_fraction: 0, shuffle: false, max_steps: %d, init: init.safetensors}
data: {x: x.npy, y: y.npy}
"""


def torch_names(model):
    m = {}
    for k, v in model.state_dict().items():
        if k.endswith("num_batches_tracked"):
            continue
        m[k] = v
    return m


def run_keel(tag, opt_yaml, steps):
    d = os.path.join(TMP, tag)
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "x.npy"), X)
    np.save(os.path.join(d, "y.npy"), Y)
    st_write(os.path.join(d, "init.safetensors"), torch_names(init_model))
    with open(os.path.join(d, "spec.yaml"), "w") as f:
        f.write(SPEC % (opt_yaml, steps))
    r = subprocess.run([KEEL, "train", os.path.join(d, "spec.yaml"), "--out", os.path.join(d, "out"), "--quiet", "--threads", "1"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("keel train failed: " + r.stderr[-400:])
    losses, gnorms = [], []
    for line in open(os.path.join(d, "out", "metrics.csv")).read().splitlines()[1:]:
        p = line.split(",")
        if p[2] == "train_step":
            losses.append(float(p[3]))
            gnorms.append(float(p[6]))
    return d, losses, gnorms


rng = np.random.RandomState(0)
X = rng.randn(32 * 20, 1, 8, 8).astype(np.float32)
Y = rng.randint(0, 10, size=32 * 20).astype(np.int64)
torch.manual_seed(0)
init_model = CNN()
W = torch.tensor([1, 1.5, 1, 1, 0.5, 1, 1, 2, 1, 1])


def torch_run(make_opt, steps):
    model = CNN()
    model.load_state_dict(init_model.state_dict())
    opt = make_opt(model.parameters())
    losses = []
    for s in range(steps):
        xb = torch.from_numpy(X[s * 32:(s + 1) * 32]); yb = torch.from_numpy(Y[s * 32:(s + 1) * 32])
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb, weight=W, label_smoothing=0.1)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, losses


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


# ---- gradients before the first step: plain SGD lr 1 for one step -> w0 - w1 = grad
try:
    d, kl, gn = run_keel("grad", "{type: sgd, lr: 1.0}", 1)
    w1 = st_read(os.path.join(d, "out", "model.safetensors"))
    model = CNN(); model.load_state_dict(init_model.state_dict())
    loss = F.cross_entropy(model(torch.from_numpy(X[:32])), torch.from_numpy(Y[:32]), weight=W, label_smoothing=0.1)
    loss.backward()
    # scaled by the largest gradient: w0 - w1 carries float rounding of w0, and
    # the conv bias in front of BatchNorm has a true gradient of 0 (noise only)
    diff, gmax, tnorm = 0.0, 0.0, 0.0
    for name, p in model.named_parameters():
        g_keel = init_model.state_dict()[name].numpy().astype(np.float64) - w1[name]
        g_t = p.grad.numpy()
        tnorm += float((g_t.astype(np.float64) ** 2).sum())
        diff = max(diff, float(np.abs(g_keel - g_t).max()))
        gmax = max(gmax, float(np.abs(g_t).max()))
    worst = diff / gmax
    ok = worst < 1e-4 and rel(gn[0], tnorm ** 0.5) < 1e-4 and rel(kl[0], loss.item()) < 1e-5
    out(ok, "train_parity_gradients_first_step", "max rel grad diff %g, grad norm %g vs %g, loss %g vs %g" % (worst, gn[0], tnorm ** 0.5, kl[0], loss.item()))
except Exception as ex:
    out(False, "train_parity_gradients_first_step", str(ex))

for tag, yaml, mk in [
    ("adamw", "{type: adamw, lr: 0.003, betas: [0.9, 0.99], eps: 1.0e-7, weight_decay: 0.05}",
     lambda p: torch.optim.AdamW(p, lr=0.003, betas=(0.9, 0.99), eps=1e-7, weight_decay=0.05)),
    ("sgd", "{type: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 0.001}",
     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.001)),
]:
    try:
        d, kl, _ = run_keel(tag, yaml, 20)
        model, tl = torch_run(mk, 20)
        worst = max(rel(a, b) for a, b in zip(kl, tl))
        out(len(kl) == 20 and worst < 1e-4, "train_parity_%s_20_steps" % tag, "max relative loss difference %g (keel %s, torch %s)" % (worst, kl[-3:], tl[-3:]))
        w = st_read(os.path.join(d, "out", "model.safetensors"))
        sd = model.state_dict()
        # c1.bias feeds BatchNorm: its true gradient is 0, so (Adam-normalised) noise moves it and the running mean it shifts; skip both
        wworst = max(float(np.abs(w[k] - sd[k].numpy()).max() / max(np.abs(sd[k].numpy()).max(), 1e-6)) for k in w if k not in ("c1.bias", "bn.running_mean"))
        out(wworst < 1e-3, "train_parity_%s_weights" % tag, "max relative weight difference %g" % wworst)
    except Exception as ex:
        out(False, "train_parity_%s_20_steps" % tag, str(ex))

# ---- export round trip: keel run on model.onnx == keel's eval forward (1e-6 relative)
try:
    d = os.path.join(TMP, "adamw")
    np.save(os.path.join(d, "xt.npy"), X[:100])
    np.save(os.path.join(d, "yt.npy"), Y[:100])
    r1 = subprocess.run([KEEL, "eval", os.path.join(d, "out"), "--data", os.path.join(d, "xt.npy") + "," + os.path.join(d, "yt.npy"),
                         "--logits", os.path.join(d, "lg.npy")], capture_output=True, text=True)
    r2 = subprocess.run([KEEL, "run", os.path.join(d, "out", "model.onnx"), "-i", os.path.join(d, "xt.npy"), "-o", os.path.join(d, "run")],
                        capture_output=True, text=True)
    if r1.returncode or r2.returncode:
        raise RuntimeError("eval: %s run: %s" % (r1.stderr[-300:], r2.stderr[-300:]))
    a = np.load(os.path.join(d, "lg.npy")); b = np.load(os.path.join(d, "run", "output.npy"))
    err = float((np.abs(a - b) / np.maximum(1.0, np.abs(a))).max())
    out(a.shape == b.shape and err <= 1e-6, "train_export_round_trip_keel_run", "max relative difference %g" % err)
    # and PyTorch's eval forward of the same weights
    w = st_read(os.path.join(d, "out", "model.safetensors"))
    m = CNN(); m.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in w.items()}, strict=False); m.eval()
    with torch.no_grad():
        t = m(torch.from_numpy(X[:100])).numpy()
    err2 = float((np.abs(a - t) / np.maximum(1.0, np.abs(t))).max())
    out(err2 <= 1e-5, "train_export_matches_torch_eval", "max relative difference %g" % err2)
except Exception as ex:
    out(False, "train_export_round_trip_keel_run", str(ex))
