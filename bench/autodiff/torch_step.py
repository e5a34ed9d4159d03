#!/usr/bin/env python3
"""PyTorch 1.13 peer of bench/autodiff/autodiff_bench.c: forward + backward
(no optimizer step) of the same MLP and CNN at the same batch sizes; median
ms per step. Usage: torch_step.py THREADS [ITERS]"""
import time, torch, torch.nn as nn, torch.nn.functional as F, sys
torch.set_num_threads(int(sys.argv[1]))
ITERS = int(sys.argv[2]) if len(sys.argv) > 2 else 20
torch.manual_seed(0)
def bench(model, x, y, iters=10):
    ts=[]
    for i in range(iters+3):
        t=time.perf_counter(); model.zero_grad(set_to_none=True); loss=F.cross_entropy(model(x),y); loss.backward(); ts.append(time.perf_counter()-t)
    ts=sorted(ts[3:]); return ts[len(ts)//2]*1e3
mlp=nn.Sequential(nn.Linear(784,512),nn.ReLU(),nn.Linear(512,512),nn.ReLU(),nn.Linear(512,10))
cnn=nn.Sequential(nn.Conv2d(1,32,3,padding=1),nn.ReLU(),nn.MaxPool2d(2),nn.Conv2d(32,64,3,padding=1),nn.ReLU(),nn.MaxPool2d(2),nn.Flatten(),nn.Linear(3136,128),nn.ReLU(),nn.Linear(128,10))
ms=bench(mlp,torch.randn(128,784),torch.randint(0,10,(128,)),ITERS); print("torch mlp b128: %.3f ms/step  %.0f samples/s"%(ms,128/ms*1e3))
ms=bench(cnn,torch.randn(64,1,28,28),torch.randint(0,10,(64,)),ITERS); print("torch cnn b64: %.3f ms/step  %.0f samples/s"%(ms,64/ms*1e3))
