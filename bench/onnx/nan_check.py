#!/usr/bin/python3
"""NaN/inf propagation of keel's max/min/clip/relu/pool kernels (issue 22):
small ONNX models (each op alone; conv + Relu/Clip epilogues, pools, Gemm,
Add + Relu) on inputs holding NaN, +-inf and -0.0 run in keel on the
default path (AVX-512, NCHWc), with KEEL_NO_NCHWC=1 and KEEL_NO_AVX512=1,
and in ONNX Runtime 1.30 (onnxruntime-node, as bench/onnx/run.sh installs
it), all against PyTorch in float64 (NaN in, NaN out, as NumPy). Prints a
markdown table; with a second keel binary (an older build) each cell shows
"old -> new". Usage: bench/onnx/nan_check.py KEEL [KEEL_OLD] (needs torch).
The unit tests (tests/unit/graph/test_nan_ops.c) check the same without
ORT or torch."""
import json, os, subprocess, sys, tempfile
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

W = tempfile.mkdtemp()
HERE = os.path.dirname(os.path.abspath(__file__))
AFTER = sys.argv[1]
BEFORE = sys.argv[2] if len(sys.argv) > 2 else None
rng = np.random.default_rng(7)

def specials(x):
    f = x.reshape(-1); n = f.size
    for pos, v in [(0, np.nan), (7 % n, np.inf), (16 % n, -np.inf), (17 % n, -0.0), (n // 2, np.nan), (n - 1, np.nan), (n - 2, np.inf), (n - 3, -np.inf)]:
        f[pos] = v
    return x

def model(name, nodes, xshape, yshape, inits=(), dt=TensorProto.FLOAT, ydt=None):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", dt, xshape)],
                          [helper.make_tensor_value_info("y", ydt or dt, yshape)], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 8
    p = os.path.join(W, "".join(ch if ch.isalnum() else "_" for ch in name) + ".onnx"); onnx.save(m, p); return p

def init(name, a): return numpy_helper.from_array(np.asarray(a), name)
def w(*s): return (rng.standard_normal(s) * 0.3).astype(np.float32)

cases = []
def case(name, nodes, x, yshape, inits=(), ydt=None):
    dt = TensorProto.DOUBLE if x.dtype == np.float64 else TensorProto.FLOAT
    cases.append((name, model(name, nodes, list(x.shape), yshape, inits, dt, ydt), x, {i.name: numpy_helper.to_array(i) for i in inits}))

import torch
import torch.nn.functional as F
def T(a): return torch.from_numpy(np.asarray(a, dtype=np.float64).copy())
def hsig(v): return torch.clamp(0.2 * v + 0.5, 0, 1)
def conv(v, I, w="w", b="b", **k): return F.conv2d(v, T(I[w]), T(I[b]), **k)
def pool(v): return F.max_pool2d(v, 3, 2, 1)
REF = {
    "Relu": lambda v, I: torch.relu(v), "Clip(0,6)": lambda v, I: torch.clamp(v, 0, 6),
    "LeakyRelu": lambda v, I: F.leaky_relu(v, 0.1), "HardSigmoid": lambda v, I: hsig(v),
    "HardSwish": lambda v, I: v * torch.clamp(v / 6 + 0.5, 0, 1),
    "Max(x,c)": lambda v, I: torch.maximum(v, T(I["c"])), "Min(x,c)": lambda v, I: torch.minimum(v, T(I["c"])),
    "ReduceMax": lambda v, I: torch.amax(v, 1), "ReduceMax axis0": lambda v, I: torch.amax(v, 0),
    "ReduceMin": lambda v, I: torch.amin(v, 1), "ReduceMin axis0": lambda v, I: torch.amin(v, 0),
    "ArgMax": lambda v, I: torch.argmax(v, 1), "ArgMin": lambda v, I: torch.argmin(v, 1),
    "Softmax": lambda v, I: torch.softmax(v, 1), "Softmax axis0": lambda v, I: torch.softmax(v, 0),
    "Relu f64": lambda v, I: torch.relu(v), "ReduceMax f64": lambda v, I: torch.amax(v, 1), "ArgMax f64": lambda v, I: torch.argmax(v, 1),
    "MaxPool 3x3/2": lambda v, I: pool(v), "GlobalMaxPool": lambda v, I: torch.amax(v, (2, 3), keepdim=True),
    "Conv3x3+Relu": lambda v, I: torch.relu(conv(v, I, padding=1)), "Conv3x3 (Winograd)": lambda v, I: conv(v, I, padding=1),
    "Conv3x3+MaxPool+dw+Clip": lambda v, I: torch.clamp(conv(pool(torch.relu(conv(v, I, padding=1))), I, "dw", "db", padding=1, groups=32), 0, 6),
    "Conv1x1+Relu": lambda v, I: torch.relu(conv(v, I)),
    "Stem7x7/2+Relu+MaxPool": lambda v, I: pool(torch.relu(conv(v, I, padding=3, stride=2))),
    "Gemm+Relu": lambda v, I: torch.relu(v @ T(I["w"]) + T(I["b"])), "Add+Relu": lambda v, I: torch.relu(v + T(I["c"])),
}

x65 = lambda dt=np.float32: specials(rng.uniform(-2, 2, (1, 65)).astype(dt))
case("Relu", [helper.make_node("Relu", ["x"], ["y"])], x65(), None)
case("Clip(0,6)", [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], x65(), None, [init("lo", np.float32(0)), init("hi", np.float32(6))])
case("LeakyRelu", [helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.1)], x65(), None)
case("HardSigmoid", [helper.make_node("HardSigmoid", ["x"], ["y"])], x65(), None)
case("HardSwish", [helper.make_node("HardSwish", ["x"], ["y"])], x65(), None)
yv = rng.uniform(-2, 2, (1, 65)).astype(np.float32); yv[0, 3] = np.nan; yv[0, 64] = np.inf
case("Max(x,c)", [helper.make_node("Max", ["x", "c"], ["y"])], x65(), None, [init("c", yv)])
case("Min(x,c)", [helper.make_node("Min", ["x", "c"], ["y"])], x65(), None, [init("c", yv)])
xr = lambda dt=np.float32: (lambda a: (specials(a[1:2]), a)[1])(rng.uniform(-2, 2, (3, 65)).astype(dt))
for op in ["ReduceMax", "ReduceMin"]:
    case(op, [helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=0)], xr(), None)
    case(op + " axis0", [helper.make_node(op, ["x"], ["y"], axes=[0], keepdims=0)], xr(), None)
for op in ["ArgMax", "ArgMin"]:
    case(op, [helper.make_node(op, ["x"], ["y"], axis=1, keepdims=0)], xr(), None, ydt=TensorProto.INT64)
case("Softmax", [helper.make_node("Softmax", ["x"], ["y"], axis=1)], xr(), None)
case("Softmax axis0", [helper.make_node("Softmax", ["x"], ["y"], axis=0)], xr(), None)
case("Relu f64", [helper.make_node("Relu", ["x"], ["y"])], x65(np.float64), None)
case("ReduceMax f64", [helper.make_node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=0)], xr(np.float64), None)
case("ArgMax f64", [helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)], xr(np.float64), None, ydt=TensorProto.INT64)
def imgs(c, h, wd):
    a = rng.uniform(-2, 2, (1, c, h, wd)).astype(np.float32)
    a[0, 1, 2, 3] = np.nan; a[0, 3, h - 1, wd - 1] = np.nan; a[0, 5, h // 2, 0] = np.inf; a[0, 7, 0, wd // 2] = -np.inf
    return a
case("MaxPool 3x3/2", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])], imgs(16, 17, 33), None)
case("GlobalMaxPool", [helper.make_node("GlobalMaxPool", ["x"], ["y"])], imgs(16, 17, 33), None)
case("Conv3x3+Relu", [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
     imgs(16, 17, 33), None, [init("w", w(32, 16, 3, 3)), init("b", w(32))])
case("Conv3x3 (Winograd)", [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
     imgs(16, 17, 33), None, [init("w", w(32, 16, 3, 3)), init("b", w(32))])
case("Conv3x3+MaxPool+dw+Clip", [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
     helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
     helper.make_node("Conv", ["p", "dw", "db"], ["d"], pads=[1, 1, 1, 1], group=32), helper.make_node("Clip", ["d", "lo", "hi"], ["y"])],
     imgs(16, 17, 33), None, [init("w", w(32, 16, 3, 3)), init("b", w(32)), init("dw", w(32, 1, 3, 3)), init("db", w(32)), init("lo", np.float32(0)), init("hi", np.float32(6))])
case("Conv1x1+Relu", [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
     imgs(16, 17, 33), None, [init("w", w(32, 16, 1, 1)), init("b", w(32))])
case("Stem7x7/2+Relu+MaxPool", [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[3, 3, 3, 3], strides=[2, 2]), helper.make_node("Relu", ["c"], ["r"]),
     helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
     imgs(8, 33, 33)[:, :3].copy(), None, [init("w", w(16, 3, 7, 7)), init("b", w(16))])
case("Gemm+Relu", [helper.make_node("Gemm", ["x", "w", "b"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
     specials(rng.uniform(-2, 2, (4, 65)).astype(np.float32)), None, [init("w", w(65, 33)), init("b", w(33))])
case("Add+Relu", [helper.make_node("Add", ["x", "c"], ["s"]), helper.make_node("Relu", ["s"], ["y"])], x65(), None, [init("c", w(1, 65))])

def same(a, b):
    if a.shape != b.shape: return False
    a = a.astype(np.float64); b = b.astype(np.float64)
    nan = np.isnan(a) | np.isnan(b)
    if (np.isnan(a) != np.isnan(b)).any(): return False
    fin = ~nan
    return np.allclose(a[fin], b[fin], rtol=1e-3, atol=1e-4, equal_nan=False) or (a[fin] == b[fin]).all()

paths = [("AVX-512 (NCHWc)", {}), ("AVX-512 NCHW", {"KEEL_NO_NCHWC": "1"}), ("AVX2", {"KEEL_NO_AVX512": "1"})]
print("| op | ORT 1.30 vs PyTorch | " + " | ".join("keel " + p + (" old → new" if BEFORE else "") for p, _ in paths) + " |")
print("|---|---|" + "---|" * len(paths))
for name, path, x, inits in cases:
    safe = name.replace(" ", "_").replace("/", "_").replace("(", "").replace(")", "").replace(",", "_").replace("+", "_")
    xb = os.path.join(W, safe + ".bin"); x.tofile(xb); np.save(os.path.join(W, safe + ".npy"), x)
    r = subprocess.run(["node", os.path.join(HERE, "nan_ort.js"), path, xb, "float64" if x.dtype == np.float64 else "float32",
                        ",".join(map(str, x.shape)), os.path.join(W, safe + ".ort")], capture_output=True, text=True)
    if r.returncode:
        print("| %s | ORT failed: %s |" % (name, r.stderr.strip()[:80])); continue
    meta = json.loads(r.stdout)
    ort = np.fromfile(os.path.join(W, safe + ".ort"), dtype={"float32": np.float32, "float64": np.float64, "int64": np.int64}[meta["type"]]).reshape(meta["dims"])
    ref = REF[name](T(x), inits).numpy()
    ortcell = "ok" if same(ort, ref) else "**differs**"
    cells = []
    for pname, env in paths:
        res = []
        for b in ([BEFORE] if BEFORE else []) + [AFTER]:
            d = os.path.join(W, safe + ("_b" if b == BEFORE else "_a") + "".join(env))
            rr = subprocess.run([b, "run", path, "--input", "x=" + os.path.join(W, safe + ".npy"), "--output-dir", d],
                                capture_output=True, text=True, env=dict(os.environ, **env))
            if rr.returncode: res.append("err"); continue
            got = np.load(os.path.join(d, "y.npy"))
            if same(got, ref): res.append("ok")
            else:
                a = got.astype(np.float64).reshape(-1); e = ref.astype(np.float64).reshape(-1)
                k = int(np.argmax(~((np.isnan(a) & np.isnan(e)) | np.isclose(a, e, rtol=1e-3, atol=1e-4))))
                res.append("**BAD** (%g vs %g)" % (a[k], e[k]))
        cells.append(" → ".join(res))
    print("| %s | %s | %s |" % (name, ortcell, " | ".join(cells)))
