#!/usr/bin/python3
"""keel's data loader vs PyTorch 1.13 DataLoader + torchvision transforms over
PIL, in one run, on the same JPEG files with the same transforms and the same
number of workers: decode, resize (shorter side) to 224, random crop 224,
random horizontal flip, normalise (ImageNet mean/std) into float NCHW batches.

usage: /usr/bin/python3 bench/images/loader_vs_torch.py [--n 2000] [--workers 2]
       [--batch 64] [--repeats 3] [--keel build/keel] [--work build/bench-images]
Prints a markdown table row and a JSON line with medians and the ratio."""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=2000)
ap.add_argument("--size", type=int, default=256, help="side of the generated JPEGs")
ap.add_argument("--workers", type=int, default=2)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--keel", default="build/keel")
ap.add_argument("--work", default="build/bench-images")
args = ap.parse_args()

from PIL import Image
import torch
import torchvision.transforms as T

jdir = os.path.join(args.work, f"jpeg-{args.n}-{args.size}")
sdir = os.path.join(args.work, f"shards-{args.n}-{args.size}")


def make_jpegs():
    """The defects set (keel datagen defects): 256x256 JPEGs, q 90, 3 classes."""
    if not os.path.exists(os.path.join(jdir, "labels.csv")):
        subprocess.run([args.keel, "datagen", "defects", "--out", jdir, "--n", str(args.n), "--size", str(args.size), "--seed", "1"],
                       check=True, stdout=subprocess.DEVNULL)
    classes = sorted(d for d in os.listdir(jdir) if os.path.isdir(os.path.join(jdir, d)))
    return [(os.path.join(jdir, c, f), k) for k, c in enumerate(classes) for f in sorted(os.listdir(os.path.join(jdir, c)))]


files = make_jpegs()
if not os.path.exists(os.path.join(sdir, "manifest.json")):
    subprocess.run([args.keel, "pack", jdir, "--out", sdir], check=True, stdout=subprocess.DEVNULL)


class Files(torch.utils.data.Dataset):
    def __init__(self, files, tf):
        self.files, self.tf = files, tf

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        f, k = self.files[i]
        with Image.open(f) as im:
            return self.tf(im.convert("RGB")), k


tf = T.Compose([T.Resize(224), T.RandomCrop(224), T.RandomHorizontalFlip(),
                T.ToTensor(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


def cpu():
    """CPU seconds of this process and its reaped children (DataLoader workers, keel)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def run_torch():
    torch.manual_seed(0)
    c0 = cpu()
    dl = torch.utils.data.DataLoader(Files(files, tf), batch_size=args.batch, shuffle=True, num_workers=args.workers)
    t0 = time.perf_counter()
    n = 0
    for x, y in dl:
        n += x.shape[0]
    rate = n / (time.perf_counter() - t0)
    del dl, x, y
    return rate, (cpu() - c0) / n * 1000


def run_keel():
    c0 = cpu()
    p = subprocess.run([args.keel, "loader", "bench", sdir, "--json", "--workers", str(args.workers), "--batch", str(args.batch),
                        "--size", "224", "--resize", "224"], capture_output=True, text=True, check=True)
    j = json.loads(p.stdout)
    j["cpu_ms"] = (cpu() - c0) / j["images"] * 1000
    return j


torch.set_num_threads(1)
tk, kk, mp, ws, qd, tc, kc = [], [], [], [], [], [], []
for r in range(args.repeats):
    rate, ms = run_torch()
    tk.append(rate); tc.append(ms)
    j = run_keel()
    kc.append(j["cpu_ms"])
    kk.append(j["images_per_s"]); mp.append(j["decode_mpix_per_s"]); ws.append(j["wait_share"]); qd.append(j["queue_depth"])
t, k = statistics.median(tk), statistics.median(kk)
res = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()} {os.cpu_count()} cores", "images": args.n,
       "jpeg_size": args.size, "workers": args.workers, "batch": args.batch, "torch_images_per_s": round(t, 1),
       "keel_images_per_s": round(k, 1), "ratio": round(k / t, 2), "keel_decode_mpix_per_s": round(statistics.median(mp), 1),
       "keel_wait_share": round(statistics.median(ws), 3), "keel_queue_depth": round(statistics.median(qd), 2),
       "torch_cpu_ms_per_image": round(statistics.median(tc), 2), "keel_cpu_ms_per_image": round(statistics.median(kc), 2),
       "load_average": round(os.getloadavg()[0], 1),
       "torch_runs": [round(x, 1) for x in tk], "keel_runs": [round(x, 1) for x in kk]}
print(json.dumps(res))
print(f"| {res['date']} | {res['machine']} | {args.n} x {args.size}² JPEG, batch {args.batch}, {args.workers} workers | "
      f"{t:.0f} | {k:.0f} | **{k / t:.2f}x** | {res['torch_cpu_ms_per_image']} | {res['keel_cpu_ms_per_image']} | "
      f"{res['keel_decode_mpix_per_s']} | {res['load_average']} |")
