#!/usr/bin/env python3
"""PyTorch 1.13 DistributedDataParallel (gloo) side of bench/train/mpi.sh:
WORLD processes x THREADS threads train the same model as keel (mlp:
784-512-512-10, cnn: the 28x28 CNN of torch_bench.py) with BATCH rows per
process and AdamW for STEPS steps; prints the samples/s of all processes
together (the slowest process's loop time). Usage:
torch_ddp.py mlp|cnn X.npy Y.npy BATCH STEPS THREADS WORLD"""
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def model_of(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def worker(rank, world, port, kind, xp, yp, B, steps, th, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(th)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(model_of(kind))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    lossf = nn.CrossEntropyLoss()
    X = torch.from_numpy(np.load(xp)); Y = torch.from_numpy(np.load(yp))
    n = X.shape[0]

    def step(i):  # this rank's rows of global batch i
        o = (i * B * world + rank * B) % n
        opt.zero_grad()
        lossf(model(X[o:o + B]), Y[o:o + B]).backward()
        opt.step()

    step(0)  # warm-up
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(steps):
        step(i + 1)
    dist.barrier()
    q.put(time.perf_counter() - t0)
    dist.destroy_process_group()


if __name__ == "__main__":
    kind, xp, yp = sys.argv[1], sys.argv[2], sys.argv[3]
    B, steps, th, world = (int(v) for v in sys.argv[4:8])
    with socket.socket() as s:  # a free port on 127.0.0.1
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=worker, args=(r, world, port, kind, xp, yp, B, steps, th, q)) for r in range(world)]
    for p in ps:
        p.start()
    dts = [q.get() for _ in ps]
    for p in ps:
        p.join()
    print("%.1f" % (steps * B * world / max(dts)))
