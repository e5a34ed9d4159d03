#!/usr/bin/env python3
"""PyTorch 1.13 side of bench/train: trains the same model on the same data
with the same batch size and optimizer for STEPS steps; prints samples/s of
the training loop. Usage: torch_bench.py mlp|cnn X.npy Y.npy BATCH STEPS THREADS"""
import sys
import time

import numpy as np
import torch
import torch.nn as nn

kind, xp, yp, B, steps, th = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(th)
X = torch.from_numpy(np.load(xp)); Y = torch.from_numpy(np.load(yp))
if kind == "mlp":
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
else:
    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
lossf = nn.CrossEntropyLoss()
n = X.shape[0]
perm = torch.randperm(n)


def step(i):
    idx = perm[(i * B) % n:(i * B) % n + B]
    opt.zero_grad()
    loss = lossf(model(X[idx]), Y[idx])
    loss.backward()
    opt.step()


step(0)  # warm-up
t0 = time.perf_counter()
for i in range(steps):
    step(i)
dt = time.perf_counter() - t0
print("%.1f" % (steps * B / dt))
