#!/usr/bin/python3
"""Real-model parity: PyTorch 1.13 exports (MLP, ResNet-18, MobileNetV2, a
2-layer TransformerEncoder with a padding mask and dynamic batch, a 2-layer
bidirectional LSTM and a GRU language model with dynamic batch and length,
an nn.EmbeddingBag recommender exported as a Loop, Swin-T with its training-mode
Dropout nodes;
random weights) are run by `keel run` and compared with PyTorch's outputs
(max abs error <= 1e-4; the recurrent models also within 1e-4 relative to
the largest output), on the default kernels (the CNNs on channel-blocked NCHWc
tensors where the CPU has AVX-512F), again with KEEL_NO_AVX512=1 (the
OpenBLAS/AVX2 paths a CPU without AVX-512F runs) and, for ResNet-18 and
MobileNetV2, with KEEL_NO_NCHWC=1 (AVX-512 kernels on NCHW) and at 1 thread
(where batch 2 runs the graph's depth-first prefix sample by sample: its
output must have the bits of the run with KEEL_SPLIT=0). Exports are
cached in $BUILD/onnx-models."""
import os
import subprocess
import sys
import tempfile

import numpy as np

src = os.environ.get("KEEL_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
build = os.path.join(src, os.environ.get("BUILD", "build"))
keel = os.environ.get("KEEL", os.path.join(build, "keel"))
models = os.path.join(build, "onnx-models")
tmp = tempfile.mkdtemp(dir=os.environ.get("KEEL_TEST_TMP"))

r = subprocess.run([sys.executable, os.path.join(src, "tests/onnx/export_models.py"), models],
                   capture_output=True, text=True)
if r.returncode != 0:
    print("FAIL onnx_models_export: " + (r.stderr or r.stdout)[-400:].replace("\n", " "))
    sys.exit(1)

ok = True
runs = [(name, mode) for mode in ("", "_noavx512") for name in ["mlp", "resnet18", "mobilenet_v2", "transformer", "lstm", "gru_lm",
                                                                  "embedding_bag", "swin_t"]]
runs += [(name, "_nonchwc") for name in ["resnet18", "mobilenet_v2"]]
runs += [(name, "_1t") for name in ["resnet18", "mobilenet_v2"]]
for name, mode in runs:
    env = dict(os.environ)
    env.pop("KEEL_NO_NCHWC", None)
    if mode == "_noavx512":
        env["KEEL_NO_AVX512"] = "1"
    elif mode == "_nonchwc":
        env["KEEL_NO_NCHWC"] = "1"
    d = os.path.join(models, name)
    for b in sorted(x for x in os.listdir(d) if x.startswith("b")):
        bd = os.path.join(d, b)
        ins = [f[:-4] for f in sorted(os.listdir(bd)) if f.endswith(".npy") and not f.startswith("expected_")]
        out = os.path.join(tmp, name + mode + b)
        cmd = [keel, "run", os.path.join(d, "model.onnx"), "--output-dir", out]
        for i in ins:
            cmd += ["--input", "%s=%s" % (i, os.path.join(bd, i + ".npy"))]
        if mode == "_1t":
            cmd += ["--threads", "1"]
            env0 = dict(env, KEEL_SPLIT="0")
            r0 = subprocess.run(cmd[:4] + [out + "_nosplit"] + cmd[5:], capture_output=True, text=True, env=env0)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        test = "onnx_model_%s_%s%s" % (name, b, mode)
        if r.returncode != 0:
            print("FAIL %s: keel run exited %d: %s" % (test, r.returncode, r.stderr[-300:].replace("\n", " ")))
            ok = False
            continue
        got = np.load(os.path.join(out, "y.npy"))
        want = np.load(os.path.join(bd, "expected_y.npy"))
        if got.shape != want.shape:
            print("FAIL %s: shape %s, expected %s" % (test, got.shape, want.shape))
            ok = False
            continue
        if mode == "_1t":
            t0 = test + "_split_bits"
            if r0.returncode != 0:
                print("FAIL %s: keel run (KEEL_SPLIT=0) exited %d: %s" % (t0, r0.returncode, r0.stderr[-300:].replace("\n", " ")))
                ok = False
            else:
                ref = np.load(os.path.join(out + "_nosplit", "y.npy"))
                if ref.shape == got.shape and ref.tobytes() == got.tobytes():
                    print("PASS %s" % t0)
                else:
                    print("FAIL %s: output differs from the run with KEEL_SPLIT=0" % t0)
                    ok = False
        err = float(np.abs(got.astype(np.float64) - want).max())
        if name in ("lstm", "gru_lm") and err > 1e-4 * max(1.0, float(np.abs(want).max())):
            print("FAIL %s: max abs error %.3e beyond 1e-4 relative" % (test, err))
            ok = False
            continue
        if err <= 1e-4:
            print("PASS %s (max abs error %.2e)" % (test, err))
        else:
            print("FAIL %s: max abs error %.3e > 1e-4" % (test, err))
            ok = False
sys.exit(0 if ok else 1)
