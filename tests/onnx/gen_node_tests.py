#!/usr/bin/python3
"""Generates the ONNX backend node tests (onnx 1.12, Debian python3-onnx) into
DIR: DIR/node/test_*/{model.onnx,test_data_set_*/}. numpy 1.24 removed the
np.float/np.int/np.bool/np.object/np.str aliases the 1.12 generator still
uses; they are restored as the builtins before onnx is imported."""
import argparse
import sys
import warnings

warnings.simplefilter("ignore")
import numpy as np  # noqa: E402

for name, typ in (("float", float), ("int", int), ("bool", bool), ("object", object), ("str", str)):
    setattr(np, name, typ)

from onnx.backend.test.cmd_tools import generate_data  # noqa: E402

if len(sys.argv) != 2:
    sys.exit("usage: gen_node_tests.py OUTDIR")
generate_data(argparse.Namespace(output=sys.argv[1], op_type=None))
