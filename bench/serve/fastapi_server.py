"""The peer of bench/serve: FastAPI + uvicorn + PyTorch serving the same MLP
(weights read from the same model.onnx) over the same KServe v2 JSON infer
request. Usage: fastapi_server.py MODEL.onnx PORT [WORKERS]
(WORKERS > 1: uvicorn's worker processes, each with the model)"""
import os
import sys

import numpy as np
import onnx
import torch
import uvicorn
from fastapi import FastAPI, Request
from onnx import numpy_helper

torch.set_num_threads(1)
m = onnx.load(os.environ.get("KEEL_BENCH_MODEL") or sys.argv[1])
inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
layers = []
for n in m.graph.node:
    if n.op_type == "Gemm":
        w, b = inits[n.input[1]], inits[n.input[2]]
        lin = torch.nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.T.copy()))
            lin.bias.copy_(torch.from_numpy(b))
        layers.append(lin)
    elif n.op_type == "Relu":
        layers.append(torch.nn.ReLU())
model = torch.nn.Sequential(*layers).eval()
app = FastAPI()


@app.post("/v2/models/mlp/infer")
async def infer(req: Request):
    body = await req.json()
    inp = body["inputs"][0]
    x = torch.tensor(np.asarray(inp["data"], dtype=np.float32).reshape(inp["shape"]))
    with torch.no_grad():
        y = model(x).numpy()
    out = {"model_name": "mlp", "model_version": "1",
           "outputs": [{"name": "y", "datatype": "FP32", "shape": list(y.shape), "data": y.ravel().tolist()}]}
    if "id" in body:
        out["id"] = body["id"]
    return out


if __name__ == "__main__":
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    if workers > 1:  # the workers import this file again: the model path goes by environment
        os.environ["KEEL_BENCH_MODEL"] = sys.argv[1]
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        uvicorn.run("fastapi_server:app", host="127.0.0.1", port=int(sys.argv[2]), workers=workers,
                    log_level="warning", access_log=False)
    else:
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)
