#!/usr/bin/env python3
"""Exports scikit-learn's digits data (8x8 images, 10 classes) to .npy files
for the keel examples: train/test split 80/20 with a fixed seed.
Usage: prepare.py OUTDIR"""
import os
import sys

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

out = sys.argv[1] if len(sys.argv) > 1 else "data"
os.makedirs(out, exist_ok=True)
d = load_digits()
X = (d.data / 16.0).astype(np.float32)
y = d.target.astype(np.int64)
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
np.save(os.path.join(out, "x_train.npy"), Xtr)
np.save(os.path.join(out, "y_train.npy"), ytr)
np.save(os.path.join(out, "x_test.npy"), Xte)
np.save(os.path.join(out, "y_test.npy"), yte)
np.save(os.path.join(out, "x_train_img.npy"), Xtr.reshape(-1, 1, 8, 8))
np.save(os.path.join(out, "x_test_img.npy"), Xte.reshape(-1, 1, 8, 8))
print(f"wrote {len(ytr)} train and {len(yte)} test rows to {out}")
