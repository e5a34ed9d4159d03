#!/usr/bin/python3
"""Writes the single-op graphs of bench/onnx/unary.sh: OUT/<name>.onnx, one
elementwise/unary op on a float32 input x of shape (1, 64, 128, 128) (1M
elements), OUT/x.npy (normal values, scale 3) and OUT/xpos.npy (|x| + 1e-3,
the input of log, sqrt and fractional powers). Prints the model names.
With a second argument K, each graph applies its op K times in a row (the
marginal cost of one op, free of the per-run overhead, is the difference of
the K and 1 runs over K - 1).
SiLU is Mul(x, Sigmoid(x)) and GELU the Div/Erf/Add/Mul/Mul decomposition,
as PyTorch exports them (both runtimes fuse them). Mish (opset 18) is left
out: keel's ONNX loader reads default-domain opsets up to 17."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

SHAPE = [1, 64, 128, 128]


def const(name, arr):
    return helper.make_tensor(name, TensorProto.FLOAT, list(arr.shape), arr.astype(np.float32).ravel().tolist())


def model(nodes, inits=(), opset=17):
    g = helper.make_graph(nodes, "unary", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="keel-bench")


def one(op, opset=17, **attrs):
    return model([helper.make_node(op, ["x"], ["y"], **attrs)], opset=opset)


def pow_model(p):
    return model([helper.make_node("Pow", ["x", "p"], ["y"])], [const("p", np.array(p, dtype=np.float32))])


def cases():
    s = np.float32
    yield "relu", one("Relu")
    yield "sigmoid", one("Sigmoid")
    yield "silu", model([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])])
    yield "hardsigmoid", one("HardSigmoid", alpha=1.0 / 6, beta=0.5)
    yield "hardswish", one("HardSwish")
    yield "gelu_erf", model([
        helper.make_node("Div", ["x", "sq2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"])],
        [const("sq2", np.array(1.4142135, dtype=s)), const("one", np.array(1, dtype=s)),
         const("half", np.array(0.5, dtype=s))])
    yield "erf", one("Erf")
    yield "tanh", one("Tanh")
    yield "exp", one("Exp")
    yield "log", one("Log")
    yield "softplus", one("Softplus")
    yield "elu", one("Elu", alpha=1.0)
    yield "selu", one("Selu")
    yield "celu", one("Celu", alpha=1.0)
    yield "leakyrelu", one("LeakyRelu", alpha=0.01)
    yield "prelu", model([helper.make_node("PRelu", ["x", "slope"], ["y"])],
                         [const("slope", np.linspace(0.01, 0.3, 64, dtype=s).reshape(64, 1, 1))])
    yield "clip", model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
                        [const("lo", np.array(0, dtype=s)), const("hi", np.array(6, dtype=s))])
    yield "sqrt", one("Sqrt")
    yield "reciprocal", one("Reciprocal")
    yield "neg", one("Neg")
    yield "abs", one("Abs")
    yield "floor", one("Floor")
    yield "round", one("Round")
    yield "pow2", pow_model(2.0)
    yield "pow0.5", pow_model(0.5)
    yield "pow-1", pow_model(-1.0)
    yield "pow1.7", pow_model(1.7)


def chain(m, k):
    """m's op applied k times in a row (x -> op -> ... -> y), initializers shared."""
    if k == 1:
        return m
    g = m.graph
    inits = {t.name for t in g.initializer}
    nodes = []
    for i in range(k):
        def ren(v, is_out):
            if v in inits:
                return v
            if v == "x":
                return "x" if i == 0 else "c%d" % (i - 1)
            if v == "y":
                return "y" if i == k - 1 else "c%d" % i
            return "%s_%d" % (v, i)
        for n in g.node:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            del c.input[:]
            del c.output[:]
            c.input.extend(ren(v, False) for v in n.input)
            c.output.extend(ren(v, True) for v in n.output)
            nodes.append(c)
    ng = helper.make_graph(nodes, "unary_chain", list(g.input), list(g.output), list(g.initializer))
    return helper.make_model(ng, opset_imports=list(m.opset_import), producer_name="keel-bench")


def main():
    out = sys.argv[1]
    k = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(1)
    x = (3 * rng.standard_normal(SHAPE)).astype(np.float32)
    np.save(os.path.join(out, "x.npy"), x)
    np.save(os.path.join(out, "xpos.npy"), np.abs(x) + np.float32(1e-3))
    names = []
    for name, m in cases():
        m = chain(m, k)
        onnx.checker.check_model(m)
        onnx.save(m, os.path.join(out, name + ".onnx"))
        names.append(name)
    print(" ".join(names))


if __name__ == "__main__":
    main()
