#!/usr/bin/python3
"""Audio ops of opset 17 against NumPy and torch, through `keel run` on
graphs built here with onnx.helper: DFT (real and complex input, lengths
that are powers of two, primes and other composites, zero-padding and
truncation by dft_length, onesided, inverse, a negative axis, float64) vs
numpy.fft; STFT (a Hann window, real signal, one-sided; complex signal,
two-sided) vs torch.stft(center=False); the window generators vs
torch.hann_window / blackman_window and the ONNX formula for Hamming (25/46);
MelWeightMatrix vs the ONNX reference's formula; a log-mel front end (STFT ->
power -> MatMul with MelWeightMatrix -> Log) vs NumPy. Error bound: 1e-4 of
the largest magnitude of the expected output (float32 outputs; 1e-9 for
float64)."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

src = os.environ.get("KEEL_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
keel = os.environ.get("KEEL", os.path.join(src, os.environ.get("BUILD", "build"), "keel"))
tmp = tempfile.mkdtemp(dir=os.environ.get("KEEL_TEST_TMP"))
ok = True
rs = np.random.RandomState(5)
NP2ONNX = {np.float32: T.FLOAT, np.float64: T.DOUBLE, np.int64: T.INT64}


def run(name, nodes, inputs, inits, want, tol=1e-4):
    """One graph: inputs {name: array} fed by npy, outputs compared with want {name: array}."""
    global ok
    vi = [h.make_tensor_value_info(k, NP2ONNX[v.dtype.type], list(v.shape)) for k, v in inputs.items()]
    vo = [h.make_tensor_value_info(k, NP2ONNX[v.dtype.type], None) for k, v in want.items()]
    g = h.make_graph(nodes, name, vi, vo, [nh.from_array(v, k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    d = os.path.join(tmp, name)
    os.makedirs(d)
    onnx.save(m, os.path.join(d, "model.onnx"))
    cmd = [keel, "run", os.path.join(d, "model.onnx"), "--output-dir", os.path.join(d, "out")]
    for k, v in inputs.items():
        np.save(os.path.join(d, k + ".npy"), v)
        cmd += ["--input", "%s=%s" % (k, os.path.join(d, k + ".npy"))]
    r = subprocess.run(cmd, capture_output=True, text=True)
    test = "onnx_audio_" + name
    if r.returncode != 0:
        print("FAIL %s: keel run exited %d: %s" % (test, r.returncode, r.stderr[-300:].replace("\n", " ")))
        ok = False
        return
    for k, w in want.items():
        got = np.load(os.path.join(d, "out", k + ".npy"))
        if got.shape != w.shape or got.dtype != w.dtype:
            print("FAIL %s: %s %s %s, expected %s %s" % (test, k, got.dtype, got.shape, w.dtype, w.shape))
            ok = False
            return
        err = float(np.max(np.abs(got.astype(np.float64) - w))) if w.size else 0.0
        big = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
        if not err <= tol * big:
            print("FAIL %s: %s max error %.3g (bound %.3g)" % (test, k, err, tol * big))
            ok = False
            return
    print("PASS %s" % test)


def cplx(z, dt=np.float32):
    return np.stack([z.real, z.imag], axis=-1).astype(dt)


# ---- DFT ----
for n in [1, 2, 7, 16, 100, 257, 1000, 1024]:
    x = rs.randn(2, n, 3, 1).astype(np.float32)
    run("dft_real_%d" % n, [h.make_node("DFT", ["x"], ["y"], axis=1)], {"x": x}, {},
        {"y": cplx(np.fft.fft(x[..., 0].astype(np.float64), axis=1))})
    run("dft_onesided_%d" % n, [h.make_node("DFT", ["x"], ["y"], axis=1, onesided=1)], {"x": x}, {},
        {"y": cplx(np.fft.rfft(x[..., 0].astype(np.float64), axis=1))})
for n, L in [(10, 15), (33, 20), (64, 100), (97, 97)]:
    x = rs.randn(3, n, 1).astype(np.float32)
    run("dft_length_%d_%d" % (n, L), [h.make_node("DFT", ["x", "L"], ["y"], axis=1)], {"x": x},
        {"L": np.array(L, np.int64)}, {"y": cplx(np.fft.fft(x[..., 0].astype(np.float64), n=L, axis=1))})
for n in [6, 31, 128]:
    z = rs.randn(4, n) + 1j * rs.randn(4, n)
    x = cplx(z)
    run("dft_inverse_%d" % n, [h.make_node("DFT", ["x"], ["y"], axis=-2, inverse=1)], {"x": x}, {},
        {"y": cplx(np.fft.ifft(x[..., 0].astype(np.float64) + 1j * x[..., 1], axis=-1))})
    run("dft_complex_axis0_%d" % n, [h.make_node("DFT", ["x"], ["y"], axis=0)], {"x": x}, {},
        {"y": cplx(np.fft.fft(x[..., 0].astype(np.float64) + 1j * x[..., 1], axis=0))})
x64 = rs.randn(2, 45, 1)
run("dft_float64_45", [h.make_node("DFT", ["x"], ["y"], axis=1)], {"x": x64}, {},
    {"y": cplx(np.fft.fft(x64[..., 0], axis=1), np.float64)}, tol=1e-9)

# ---- STFT ----
sig = rs.randn(2, 1600).astype(np.float32)
win = torch.hann_window(400, dtype=torch.float64)
ref = torch.stft(torch.from_numpy(sig.astype(np.float64)), n_fft=400, hop_length=160, win_length=400, window=win,
                 center=False, onesided=True, return_complex=True).numpy()  # [batch, bins, frames]
run("stft_hann_400_160", [h.make_node("STFT", ["x", "step", "w"], ["y"])], {"x": sig[..., None]},
    {"step": np.array(160, np.int64), "w": win.numpy().astype(np.float32)}, {"y": cplx(ref.transpose(0, 2, 1))})
zs = (rs.randn(1, 300) + 1j * rs.randn(1, 300))
ref = torch.stft(torch.from_numpy(zs), n_fft=50, hop_length=25, window=torch.ones(50, dtype=torch.float64),
                 center=False, onesided=False, return_complex=True).numpy()
run("stft_complex_two_sided", [h.make_node("STFT", ["x", "step", "", "fl"], ["y"], onesided=0)], {"x": cplx(zs)},
    {"step": np.array(25, np.int64), "fl": np.array(50, np.int64)}, {"y": cplx(ref.transpose(0, 2, 1))})

# ---- windows ----
for size in [1, 2, 16, 401]:
    for periodic in [1, 0]:
        tp = bool(periodic)
        k = np.arange(size, dtype=np.float64)
        N = size if periodic else size - 1
        def onnx_window(a0, a1, a2):  # the spec's formula; torch returns [1] for any window of size 1
            return a0 + a1 * np.cos(2 * np.pi * k / N) + a2 * np.cos(4 * np.pi * k / N) if N else np.ones(size)

        hann, black = onnx_window(0.5, -0.5, 0), onnx_window(0.42, -0.5, 0.08)
        if size > 1:
            hann, black = (torch.hann_window(size, periodic=tp, dtype=torch.float64).numpy(),
                           torch.blackman_window(size, periodic=tp, dtype=torch.float64).numpy())
        for op, want in [("HannWindow", hann), ("BlackmanWindow", black), ("HammingWindow", onnx_window(25 / 46, -21 / 46, 0))]:
            run("%s_%d_%s" % (op.lower(), size, "periodic" if periodic else "symmetric"),
                [h.make_node(op, ["size"], ["y"], periodic=periodic)], {"size": np.array(size, np.int64)}, {},
                {"y": want.astype(np.float32)})
run("hannwindow_float64", [h.make_node("HannWindow", ["size"], ["y"], output_datatype=T.DOUBLE)],
    {"size": np.array(64, np.int64)}, {}, {"y": torch.hann_window(64, dtype=torch.float64).numpy()}, tol=1e-12)


# ---- MelWeightMatrix ----
def mel_ref(mels, dft, rate, lo, hi):
    bins = dft // 2 + 1
    lo_m, hi_m = 2595 * np.log10(1 + lo / 700), 2595 * np.log10(1 + hi / 700)
    f = np.arange(0, mels + 2) * ((hi_m - lo_m) / (mels + 2)) + lo_m
    f = (((dft + 1) * (700 * (np.power(10, f / 2595) - 1))) // rate).astype(int)
    out = np.zeros((bins, mels))
    for i in range(mels):
        l, c, u = f[i], f[i + 1], f[i + 2]
        if c == l:
            if c < bins:
                out[c, i] = 1
        else:
            for j in range(l, min(c + 1, bins)):
                out[j, i] = (j - l) / (c - l)
        for j in range(c, min(u, bins)):
            out[j, i] = (u - j) / (u - c)
    return out


mel_in = ["mels", "dft", "rate", "lo", "hi"]
for mels, dft, rate, lo, hi in [(40, 512, 16000, 20.0, 8000.0), (8, 16, 8192, 0.0, 4096.0), (23, 401, 22050, 50.0, 11025.0)]:
    vals = [np.array(mels, np.int64), np.array(dft, np.int64), np.array(rate, np.int64), np.array(lo, np.float32),
            np.array(hi, np.float32)]
    run("melweightmatrix_%d_%d" % (mels, dft), [h.make_node("MelWeightMatrix", mel_in, ["y"])], {},
        dict(zip(mel_in, vals)), {"y": mel_ref(mels, dft, rate, lo, hi).astype(np.float32)})

# ---- a log-mel front end: STFT -> power -> mel filter bank -> log ----
sig = rs.randn(1, 4000).astype(np.float32)
wh = torch.hann_window(256, dtype=torch.float64).numpy()
spec = np.stack([np.fft.rfft(sig[0, i * 128:i * 128 + 256].astype(np.float64) * wh) for i in range((4000 - 256) // 128 + 1)])
mel = mel_ref(32, 256, 16000, 0.0, 8000.0)
want = np.log(np.abs(spec) ** 2 @ mel + 1e-6)[None]
nodes = [h.make_node("HannWindow", ["wsize"], ["w"]), h.make_node("STFT", ["x", "step", "w"], ["s"]),
         h.make_node("Mul", ["s", "s"], ["s2"]), h.make_node("ReduceSum", ["s2", "last"], ["p"], keepdims=0),
         h.make_node("MelWeightMatrix", mel_in, ["m"]), h.make_node("MatMul", ["p", "m"], ["pm"]),
         h.make_node("Add", ["pm", "eps"], ["pe"]), h.make_node("Log", ["pe"], ["y"])]
inits = dict(zip(mel_in, [np.array(32, np.int64), np.array(256, np.int64), np.array(16000, np.int64),
                          np.array(0.0, np.float32), np.array(8000.0, np.float32)]))
inits.update({"wsize": np.array(256, np.int64), "step": np.array(128, np.int64), "last": np.array([-1], np.int64),
              "eps": np.array(1e-6, np.float32)})
run("log_mel_front_end", nodes, {"x": sig[..., None]}, inits, {"y": want.astype(np.float32)})

sys.exit(0 if ok else 1)
