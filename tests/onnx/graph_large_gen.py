#!/usr/bin/python3
"""Writes a large ONNX graph for the graph-size tests (tests/integration/graph_large.sh):
  chain N [OP]: x -> OP -> OP -> ... (N nodes; OP Relu or Add(x, x))
  wide N W: x -> W parallel chains of Relu, summed pairwise by Add nodes,
            N nodes in all (many branches, W values live at once);
  dup N:    a chain whose last node writes the output of node N/2 again
            (duplicate output names: the load must refuse it, naming the node).
Usage: graph_large_gen.py OUT.onnx chain|wide|dup N [OP|W]"""
import sys

import onnx
from onnx import TensorProto, helper


def chain(n, op):
    nodes, prev = [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else "t%d" % i
        ins = [prev, prev] if op == "Add" else [prev]
        nodes.append(helper.make_node(op, ins, [out], name="n%d" % i))
        prev = out
    return nodes


def wide(n, w):
    depth = max(1, (n - (w - 1)) // w)
    nodes, heads = [], []
    for b in range(w):
        prev = "x"
        for d in range(depth):
            out = "b%d_%d" % (b, d)
            nodes.append(helper.make_node("Relu", [prev], [out], name="r%d_%d" % (b, d)))
            prev = out
        heads.append(prev)
    k = 0
    while len(heads) > 1:
        nxt = []
        for i in range(0, len(heads) - 1, 2):
            out = "s%d" % k
            k += 1
            nodes.append(helper.make_node("Add", [heads[i], heads[i + 1]], [out], name="a%d" % k))
            nxt.append(out)
        if len(heads) % 2:
            nxt.append(heads[-1])
        heads = nxt
    nodes.append(helper.make_node("Identity", [heads[0]], ["y"], name="out"))
    return nodes


def main():
    path, kind, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    arg = sys.argv[4] if len(sys.argv) > 4 else None
    if kind == "wide":
        nodes = wide(n, int(arg or 256))
    else:
        nodes = chain(n, arg or "Relu")
    if kind == "dup":
        nodes.insert(n - 1, helper.make_node("Neg", [nodes[n // 2].input[0]], [nodes[n // 2].output[0]], name="again"))
    g = helper.make_graph(nodes, "large",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


main()
