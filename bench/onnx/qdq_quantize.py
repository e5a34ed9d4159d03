#!/usr/bin/python3
"""Static QDQ quantization of the exported fp32 CNNs (ResNet-18, MobileNetV2),
written as ONNX Runtime's quantizer writes them (quantize_static with
QuantFormat.QDQ, per_channel=True, MinMax calibration): uint8 activations
(asymmetric, range widened to include 0), int8 weights symmetric per output
channel (DequantizeLinear axis 0), int32 biases with scale x_scale *
w_scale[c] and zero point 0, a QuantizeLinear -> DequantizeLinear pair on
every activation a quantized op (Conv, Gemm, Add, MaxPool, Flatten) reads or
writes, Relu/Clip(0, 6) after a Conv or Add removed (the output's Q, whose
range starts at 0 and ends at or below 6, clamps the same values), MaxPool and
Flatten keeping their input's parameters. Calibration runs the fp32 graph in
NumPy on seeded random images.

  qdq_quantize.py FP32.onnx OUT.onnx [--calib N] [--seed S] [--extra-output]
      --extra-output also makes the uint8 tensor in front of the global
      average pool a graph output ("q_features"): it is computed by integer
      ops only (tests compare it bit for bit).
  qdq_quantize.py --reference QDQ.onnx IN.npy OUTDIR
      evaluates QDQ.onnx with the int8 semantics of the fused ops (ONNX
      Runtime's QLinearConv/QLinearMatMul: int32 sums, multiplier
      x_scale * w_scale / y_scale in float32, rint, saturate; DQ -> Add -> Q
      and DQ -> MaxPool -> Q in float32 as the unfused graph) and writes
      OUTDIR/<output>.npy for every graph output.
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

# ---------------------------------------------------------------- NumPy ops


def attrs(n):
    return {a.name: helper.get_attribute_value(a) for a in n.attribute}


def conv(x, w, b, a):
    """float64/float32 NCHW conv (groups, strides, pads, dilations)."""
    N, C, H, W = x.shape
    M, Cg, kh, kw = w.shape
    s = a.get("strides", [1, 1])
    d = a.get("dilations", [1, 1])
    p = a.get("pads", [0, 0, 0, 0])
    g = a.get("group", 1)
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])))
    OH = (H + p[0] + p[2] - d[0] * (kh - 1) - 1) // s[0] + 1
    OW = (W + p[1] + p[3] - d[1] * (kw - 1) - 1) // s[1] + 1

    def tap(i, j, c0, c1):
        return xp[:, c0:c1, i * d[0]:i * d[0] + s[0] * (OH - 1) + 1:s[0], j * d[1]:j * d[1] + s[1] * (OW - 1) + 1:s[1]]

    if g == C and g == M and Cg == 1:  # depthwise
        out = np.zeros((N, M, OH, OW), x.dtype)
        for i in range(kh):
            for j in range(kw):
                out += tap(i, j, 0, C) * w[None, :, 0, i, j, None, None]
    else:
        Mg = M // g
        out = np.empty((N, M, OH, OW), x.dtype)
        for gi in range(g):
            cols = np.empty((N, Cg, kh, kw, OH, OW), x.dtype)
            for i in range(kh):
                for j in range(kw):
                    cols[:, :, i, j] = tap(i, j, gi * Cg, (gi + 1) * Cg)
            cols = cols.reshape(N, Cg * kh * kw, OH * OW)
            wg = w[gi * Mg:(gi + 1) * Mg].reshape(Mg, -1)
            out[:, gi * Mg:(gi + 1) * Mg] = np.matmul(wg[None], cols).reshape(N, Mg, OH, OW)
    if b is not None:
        out += b.reshape(1, -1, 1, 1).astype(out.dtype)
    return out


def maxpool(x, a):
    k = a["kernel_shape"]
    s = a.get("strides", [1, 1])
    p = a.get("pads", [0, 0, 0, 0])
    N, C, H, W = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])), constant_values=-np.inf)
    OH = (H + p[0] + p[2] - k[0]) // s[0] + 1
    OW = (W + p[1] + p[3] - k[1]) // s[1] + 1
    out = np.full((N, C, OH, OW), -np.inf, x.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            out = np.maximum(out, xp[:, :, i:i + s[0] * (OH - 1) + 1:s[0], j:j + s[1] * (OW - 1) + 1:s[1]])
    return out


def quantize(x, s, z):
    z = np.asarray(z)
    lo, hi = (-128, 127) if z.dtype == np.int8 else (0, 255)
    q = np.rint(np.asarray(x, np.float32) / np.float32(s)) + z.astype(np.float32)
    return np.clip(q, lo, hi).astype(z.dtype)


def dequantize(q, s, z, axis=1):
    s = np.asarray(s, np.float32)
    z = np.asarray(z).astype(np.int32)
    if s.size > 1:
        shape = [1] * q.ndim
        shape[axis] = s.size
        s, z = s.reshape(shape), z.reshape(shape)
    return ((q.astype(np.int32) - z).astype(np.float32) * s).astype(np.float32)


def run_fp32(model, feeds):
    """Every tensor of the fp32 graph (Constant-free after load())."""
    env = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    env.update(feeds)
    for n in model.graph.node:
        a, x = attrs(n), [env[i] if i else None for i in n.input]
        t = n.op_type
        if t == "Conv":
            y = conv(x[0], x[1], x[2] if len(x) > 2 else None, a).astype(np.float32)
        elif t == "Relu":
            y = np.maximum(x[0], 0)
        elif t == "Clip":
            y = np.clip(x[0], x[1], x[2])
        elif t == "Add":
            y = x[0] + x[1]
        elif t == "MaxPool":
            y = maxpool(x[0], a)
        elif t == "GlobalAveragePool":
            y = x[0].mean(axis=(2, 3), keepdims=True)
        elif t == "Flatten":
            y = x[0].reshape(x[0].shape[0], -1)
        elif t == "Gemm":
            y = x[0] @ (x[1].T if a.get("transB", 0) else x[1]) + x[2]
        else:
            raise SystemExit("qdq_quantize: unsupported op %s" % t)
        env[n.output[0]] = y.astype(np.float32)
    return env


def load(path):
    """The model with its Constant nodes as initializers."""
    m = onnx.load(path)
    keep = []
    for n in m.graph.node:
        if n.op_type == "Constant":
            t = numpy_helper.from_array(numpy_helper.to_array(attrs(n)["value"]), n.output[0])
            m.graph.initializer.append(t)
        else:
            keep.append(n)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    return m


# ---------------------------------------------------------------- quantizer


def act_params(lo, hi):
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    s = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(1.0)
    z = np.uint8(np.clip(np.rint(-lo / s), 0, 255))
    return s, z


def quantize_model(model, calib):
    g = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    ranges = {}
    for x in calib:
        env = run_fp32(model, {g.input[0].name: x})
        for k, v in env.items():
            if k in inits:
                continue
            lo, hi = float(v.min()), float(v.max())
            if k in ranges:
                lo, hi = min(lo, ranges[k][0]), max(hi, ranges[k][1])
            ranges[k] = (lo, hi)
    producer = {o: n for n in g.node for o in n.output}
    consumers = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    # Relu/Clip(0, <=6) after Conv/Add: removed, the producer writes the activation's output
    rename = {}
    nodes = []
    for n in g.node:
        if n.op_type in ("Relu", "Clip") and n.input[0] in producer and producer[n.input[0]].op_type in ("Conv", "Add") \
                and len(consumers.get(n.input[0], [])) == 1:
            lo = 0.0 if n.op_type == "Relu" else float(inits[n.input[1]])
            hi = np.inf if n.op_type == "Relu" else float(inits[n.input[2]])
            if lo == 0.0 and ranges[n.output[0]][1] <= hi:
                rename[n.input[0]] = n.output[0]
                continue
        nodes.append(n)
    for n in nodes:
        for k, o in enumerate(n.output):
            if o in rename:
                n.output[k] = rename[o]
    new_nodes, new_inits = [], []
    qparams = {}  # activation -> (scale name, zp name, scale, zp)

    def qdq(name, params_of=None):
        """name -> its DQ(Q(name)) value, made once."""
        if name in qparams:
            return qparams[name][4]
        if params_of is not None:
            sn, zn, s, z = qparams[params_of][:4]
        else:
            s, z = act_params(*ranges[name])
            sn, zn = name + "_scale", name + "_zero_point"
            new_inits.append(numpy_helper.from_array(np.array(s, np.float32), sn))
            new_inits.append(numpy_helper.from_array(np.array(z, np.uint8), zn))
        new_nodes.append(helper.make_node("QuantizeLinear", [name, sn, zn], [name + "_quantized"],
                                          name=name + "_QuantizeLinear"))
        new_nodes.append(helper.make_node("DequantizeLinear", [name + "_quantized", sn, zn], [name + "_dequantized"],
                                          name=name + "_DequantizeLinear"))
        qparams[name] = (sn, zn, s, z, name + "_dequantized")
        return name + "_dequantized"

    def weight(name, axis):
        w = inits[name]
        red = tuple(i for i in range(w.ndim) if i != axis)
        amax = np.abs(w).max(axis=red)
        s = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
        shape = [1] * w.ndim
        shape[axis] = -1
        q = np.clip(np.rint(w / s.reshape(shape)), -127, 127).astype(np.int8)
        new_inits.append(numpy_helper.from_array(q, name + "_quantized"))
        new_inits.append(numpy_helper.from_array(s, name + "_scale"))
        new_inits.append(numpy_helper.from_array(np.zeros(s.shape, np.int8), name + "_zero_point"))
        new_nodes.append(helper.make_node("DequantizeLinear", [name + "_quantized", name + "_scale",
                                                               name + "_zero_point"], [name + "_dequantized"],
                                          name=name + "_DequantizeLinear", axis=axis))
        return name + "_dequantized", s

    def bias(name, xs, ws):
        bs = (np.float32(xs) * ws).astype(np.float32)
        q = np.rint(inits[name] / bs).astype(np.int32)
        new_inits.append(numpy_helper.from_array(q, name + "_quantized"))
        new_inits.append(numpy_helper.from_array(bs, name + "_scale"))
        new_inits.append(numpy_helper.from_array(np.zeros(bs.shape, np.int32), name + "_zero_point"))
        new_nodes.append(helper.make_node("DequantizeLinear", [name + "_quantized", name + "_scale",
                                                               name + "_zero_point"], [name + "_dequantized"],
                                          name=name + "_DequantizeLinear", axis=0))
        return name + "_dequantized"

    final = {}  # float output -> its dequantized replacement for consumers
    for n in nodes:
        t = n.op_type
        ins = [final.get(i, i) for i in n.input]
        if t in ("Conv", "Gemm"):
            x = qdq(n.input[0])
            w, ws = weight(n.input[1], 0)
            b = bias(n.input[2], qparams[n.input[0]][2], ws) if len(n.input) > 2 else None
            ins = [x, w] + ([b] if b else [])
        elif t == "Add":
            ins = [qdq(n.input[0]), qdq(n.input[1])]
        elif t in ("MaxPool", "Flatten"):
            ins = [qdq(n.input[0])]
        new_nodes.append(helper.make_node(t, ins, list(n.output), name=n.name, **attrs(n)))
        if t in ("Conv", "Gemm", "Add"):
            qdq(n.output[0])
        elif t in ("MaxPool", "Flatten"):
            qdq(n.output[0], params_of=n.input[0])
        if n.output[0] in qparams:
            final[n.output[0]] = qparams[n.output[0]][4]
    out_name = g.output[0].name
    used = {i for n in new_nodes for i in n.input} | {o.name for o in g.output}
    keep_inits = [i for i in g.initializer if i.name in used]
    out = onnx.ValueInfoProto()
    out.CopyFrom(g.output[0])
    out.name = final.get(out_name, out_name)
    graph = helper.make_graph(new_nodes, g.name, list(g.input), [out], keep_inits + new_inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="keel qdq_quantize.py")
    return m, qparams


def add_feature_output(m):
    """The Q output feeding the global average pool as a graph output."""
    g = m.graph
    gap = [n for n in g.node if n.op_type == "GlobalAveragePool"][0]
    dq = [n for n in g.node if n.output[0] == gap.input[0]][0]
    q = dq.input[0]
    g.output.append(helper.make_tensor_value_info(q, onnx.TensorProto.UINT8, ["batch", None, None, None]))
    return q


# ---------------------------------------------------------------- int8 reference


def run_int8(model, feeds):
    g = model.graph
    env = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    env.update(feeds)
    producer = {o: n for n in g.node for o in n.output}
    nuse = {}
    for n in g.node:
        for i in n.input:
            nuse[i] = nuse.get(i, 0) + 1
    fused = {}  # Q output -> computed by a fused op
    for n in g.node:
        a, t = attrs(n), n.op_type
        if t in ("Conv", "Gemm") and n.input[0] in producer and producer[n.input[0]].op_type == "DequantizeLinear":
            # the chain DQ(x), DQ(w), DQ(b) -> op -> Q: integer sums, float32 requantization
            dx, dw = producer[n.input[0]], producer[n.input[1]]
            qn = [c for c in g.node if c.input and c.input[0] == n.output[0]][0]
            xq, xs, xz = env[dx.input[0]], env[dx.input[1]], env[dx.input[2]]
            wq, ws, wz = env[dw.input[0]], env[dw.input[1]], env[dw.input[2]]
            ys, yz = env[qn.input[1]], env[qn.input[2]]
            xi = xq.astype(np.float64) - float(xz)
            wi = wq.astype(np.float64) - wz.astype(np.float64).reshape([-1] + [1] * (wq.ndim - 1))
            if t == "Conv":
                acc = conv(xi, wi, None, a)
            else:
                acc = xi @ (wi.T if a.get("transB", 0) else wi)
            if len(n.input) > 2:
                acc = acc + env[producer[n.input[2]].input[0]].astype(np.float64).reshape(
                    (1, -1, 1, 1) if t == "Conv" else (1, -1))
            acc = acc.astype(np.int64).astype(np.int32)
            mult = (np.float32(xs) * ws.astype(np.float32) / np.float32(ys)).astype(np.float32)
            mult = mult.reshape((1, -1, 1, 1) if t == "Conv" else (1, -1))
            v = np.rint(acc.astype(np.float32) * mult) + np.float32(yz)
            env[qn.output[0]] = np.clip(v, 0, 255).astype(np.uint8)
            fused[qn.output[0]] = True
            continue
        if t == "QuantizeLinear" and n.output[0] in fused:
            continue
        x = [env[i] if i else None for i in n.input]
        if t == "QuantizeLinear":
            y = quantize(x[0], x[1], x[2])
        elif t == "DequantizeLinear":
            y = dequantize(x[0], x[1], x[2], a.get("axis", 1))
        elif t == "Add":
            y = x[0] + x[1]
        elif t == "MaxPool":
            y = maxpool(x[0], a)
        elif t == "GlobalAveragePool":
            y = x[0].mean(axis=(2, 3), keepdims=True, dtype=np.float32)
        elif t == "Flatten":
            y = x[0].reshape(x[0].shape[0], -1)
        elif t == "Relu":
            y = np.maximum(x[0], 0)
        elif t == "Clip":
            y = np.clip(x[0], x[1], x[2])
        else:
            raise SystemExit("qdq_quantize: unsupported op %s in the reference" % t)
        env[n.output[0]] = y
    return env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--extra-output", action="store_true")
    a = ap.parse_args()
    if a.reference:
        m = onnx.load(a.model)
        x = np.load(a.out)
        env = run_int8(m, {m.graph.input[0].name: x})
        os.makedirs(a.outdir, exist_ok=True)
        for o in m.graph.output:
            np.save(os.path.join(a.outdir, o.name.replace("/", "_") + ".npy"), env[o.name])
        return
    m = load(a.model)
    shape = [d.dim_value or 1 for d in m.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(a.seed)
    calib = [rng.standard_normal(shape).astype(np.float32) for _ in range(a.calib)]
    q, _ = quantize_model(m, calib)
    if a.extra_output:
        add_feature_output(q)
    onnx.checker.check_model(q)
    onnx.save(q, a.out)
    print("qdq_quantize: %s -> %s (%d nodes)" % (a.model, a.out, len(q.graph.node)), file=sys.stderr)


if __name__ == "__main__":
    main()
