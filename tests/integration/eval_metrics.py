"""keel eval's metrics against scikit-learn on the same model outputs
(--logits): a binary model (BCE: precision/recall/F1 per class, Brier score,
average precision, the F1-optimal and a given threshold, ECE against a numpy
reference), a 3-class model (per-class precision/recall/F1, macro F1) and a
regression model (MAE, RMSE, R², the mean predictor's errors). Tolerance
1e-9 relative (the same float32 outputs, double arithmetic on both sides)."""
import json
import os
import subprocess
import sys

import numpy as np
from sklearn import metrics as skm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylib"))
from report import report  # noqa: E402

KEEL = os.environ.get("KEEL", "build/keel")
d = os.path.join(os.environ.get("KEEL_TEST_TMP", "/tmp"), "eval-metrics")
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(12)
TOL = 1e-9


def near(a, b):
    return a is not None and b is not None and abs(a - b) <= TOL * max(1.0, abs(b))


def train_eval(name, loss, out, x, y, extra=()):
    np.save(os.path.join(d, name + "_x.npy"), x.astype(np.float32))
    np.save(os.path.join(d, name + "_y.npy"), y)
    with open(os.path.join(d, name + ".yaml"), "w") as f:
        f.write("seed: 3\ninput: {shape: [%d]}\nlayers:\n  - {type: linear, out: 16}\n  - {type: relu}\n"
                "  - {type: linear, out: %d}\nloss: {type: %s}\noptimizer: {type: adamw, lr: 0.01}\n"
                "train: {epochs: %d, batch_size: 32, val_fraction: 0.2}\ndata: {x: %s_x.npy, y: %s_y.npy}\n"
                % (x.shape[1], out, loss, 30 if name == "wide" else 3, name, name))
    r = subprocess.run([KEEL, "train", name + ".yaml", "--out", name, "--quiet"], cwd=d, capture_output=True, text=True)
    if r.returncode:
        report(name + "_train", False, r.stderr[-400:])
        return None, None
    r = subprocess.run([KEEL, "eval", name, "--data", "%s_x.npy,%s_y.npy" % (name, name), "--json", "--logits",
                        name + "_out.npy"] + list(extra), cwd=d, capture_output=True, text=True)
    if r.returncode:
        report(name + "_eval", False, r.stderr[-400:])
        return None, None
    return json.loads(r.stdout), np.load(os.path.join(d, name + "_out.npy")).astype(np.float64)


# ---- binary (one BCE logit) ----
x = rng.normal(size=(600, 5))
y = (x[:, 0] + 0.5 * x[:, 1] + rng.normal(scale=0.8, size=600) > 0).astype(np.float32)
j, z = train_eval("bin", "bce_with_logits", 1, x, y, ["--threshold", "0.3"])
if j:
    p = 1 / (1 + np.exp(-z[:, 0]))
    yt = y.astype(int)
    pred = (z[:, 0] > 0).astype(int)
    P, R, F, S = skm.precision_recall_fscore_support(yt, pred, zero_division=0)
    ok = all(near(j["per_class"][c]["precision"], P[c]) and near(j["per_class"][c]["recall"], R[c]) and
             near(j["per_class"][c]["f1"], F[c]) and j["per_class"][c]["support"] == S[c] for c in (0, 1))
    report("eval_binary_per_class_vs_sklearn", ok, (j.get("per_class"), P, R, F))
    report("eval_brier_vs_sklearn", near(j.get("brier"), skm.brier_score_loss(yt, p)), (j.get("brier"), skm.brier_score_loss(yt, p)))
    report("eval_average_precision_vs_sklearn", near(j.get("average_precision"), skm.average_precision_score(yt, p)),
           (j.get("average_precision"), skm.average_precision_score(yt, p)))
    bins = np.minimum((p * 10).astype(int), 9)
    ece = sum((bins == b).sum() / len(p) * abs(p[bins == b].mean() - yt[bins == b].mean()) for b in range(10) if (bins == b).any())
    report("eval_ece_vs_numpy", near(j.get("ece"), ece), (j.get("ece"), ece))
    rel = j.get("reliability", [])
    report("eval_reliability_bins", len(rel) == 10 and sum(b["count"] for b in rel) == len(p), rel)
    pp, rr, tt = skm.precision_recall_curve(yt, p)
    f1s = 2 * pp * rr / np.maximum(pp + rr, 1e-300)
    best = f1s[:-1].max()
    report("eval_best_f1_threshold_vs_sklearn", near(j["best_f1_threshold"]["f1"], best), (j.get("best_f1_threshold"), best))
    at = (p >= 0.3).astype(int)
    report("eval_at_threshold_vs_sklearn", near(j["at_threshold"]["f1"], skm.f1_score(yt, at)) and
           near(j["at_threshold"]["precision"], skm.precision_score(yt, at, zero_division=0)) and
           near(j["at_threshold"]["accuracy"], skm.accuracy_score(yt, at)), (j.get("at_threshold"),))
    svg = open(os.path.join(d, "bin", "curves.svg")).read()
    report("train_curves_titled_bce", "keel train: BCE loss" in svg and "validation accuracy" in svg, svg[:300])
    meta = json.load(open(os.path.join(d, "bin", "meta.json")))
    report("eval_meta_declares_sigmoid", meta.get("output") == {"postprocess": "sigmoid", "classes": 2}, meta.get("output"))
    report("eval_auc_vs_sklearn", near(j.get("auc"), skm.roc_auc_score(yt, p)), (j.get("auc"), skm.roc_auc_score(yt, p)))

# ---- meta.json final_metrics.val_auc: the binary model's AUC on its validation rows (given as val_x/val_y), the
# reference serving's live AUC is compared with; against scikit-learn on keel eval's logits of the same rows
# (tolerance 1e-3: the trainer's batches differ from eval's, and the last bits of a logit can reorder near-ties)
xv = rng.normal(size=(300, 5))
yv = (xv[:, 0] + 0.5 * xv[:, 1] + rng.normal(scale=0.8, size=300) > 0).astype(np.float32)
for nm, a in (("binv_x", x), ("binv_y", y), ("binv_vx", xv), ("binv_vy", yv)):
    np.save(os.path.join(d, nm + ".npy"), a.astype(np.float32))
with open(os.path.join(d, "binv.yaml"), "w") as f:
    f.write("seed: 3\ninput: {shape: [5]}\nlayers:\n  - {type: linear, out: 16}\n  - {type: relu}\n"
            "  - {type: linear, out: 1}\nloss: {type: bce_with_logits}\noptimizer: {type: adamw, lr: 0.01}\n"
            "train: {epochs: 3, batch_size: 32}\n"
            "data: {x: binv_x.npy, y: binv_y.npy, val_x: binv_vx.npy, val_y: binv_vy.npy}\n")
r = subprocess.run([KEEL, "train", "binv.yaml", "--out", "binv", "--quiet"], cwd=d, capture_output=True, text=True)
r2 = subprocess.run([KEEL, "eval", "binv", "--data", "binv_vx.npy,binv_vy.npy", "--json", "--logits", "binv_out.npy"],
                    cwd=d, capture_output=True, text=True)
if r.returncode or r2.returncode:
    report("train_meta_val_auc", False, (r.stderr[-300:], r2.stderr[-300:]))
else:
    va = json.load(open(os.path.join(d, "binv", "meta.json"))).get("final_metrics", {}).get("val_auc")
    ref = skm.roc_auc_score(yv.astype(int), np.load(os.path.join(d, "binv_out.npy"))[:, 0])
    report("train_meta_val_auc", va is not None and abs(va - ref) <= 1e-3 and 0.5 < ref, (va, ref))

# ---- 3 classes (cross entropy) ----
x = rng.normal(size=(500, 4))
y = np.argmax(x[:, :3] + rng.normal(scale=0.7, size=(500, 3)), axis=1).astype(np.int64)
j, z = train_eval("multi", "cross_entropy", 3, x, y)
if j:
    pred = z.argmax(axis=1)
    P, R, F, S = skm.precision_recall_fscore_support(y, pred, zero_division=0)
    ok = all(near(j["per_class"][c]["f1"], F[c]) and near(j["per_class"][c]["precision"], P[c]) for c in range(3))
    report("eval_multiclass_per_class_vs_sklearn", ok, (j.get("per_class"), P, R, F))
    meta = json.load(open(os.path.join(d, "multi", "meta.json")))
    report("eval_meta_declares_softmax", meta.get("output") == {"postprocess": "softmax", "classes": 3}, meta.get("output"))
    report("eval_macro_f1_vs_sklearn", near(j.get("macro_f1"), skm.f1_score(y, pred, average="macro")),
           (j.get("macro_f1"), skm.f1_score(y, pred, average="macro")))

# ---- regression (mse) ----
x = rng.normal(size=(400, 3))
y = (2 * x[:, 0] - x[:, 1] + rng.normal(scale=0.3, size=400)).astype(np.float32).reshape(-1, 1)
j, z = train_eval("reg", "mse", 1, x, y)
if j:
    yt, yp = y[:, 0].astype(np.float64), z[:, 0]
    meta = json.load(open(os.path.join(d, "reg", "meta.json")))
    report("eval_meta_declares_regression", meta.get("output") == {"postprocess": "none"}, meta.get("output"))
    fm = meta.get("final_metrics", {})
    report("train_regression_val_metrics", all(k in fm for k in ("val_mae", "val_rmse", "val_r2", "val_baseline_rmse"))
           and abs(fm["val_rmse"] ** 2 - fm["val_loss"]) <= 1e-6 * max(1.0, fm["val_loss"]) and fm["val_r2"] < 1, fm)
    svg = open(os.path.join(d, "reg", "curves.svg")).read()
    losses = [float(line.split(",")[3]) for line in open(os.path.join(d, "reg", "metrics.csv")).read().splitlines()[1:]
              if line.split(",")[3] not in ("", "nan")]
    wide = max(losses) / min(v for v in losses if v > 0) > 100
    report("train_curves_titled_by_loss", "keel train: MSE loss" in svg and "accuracy" not in svg
           and (("(log scale)" in svg) == wide), (svg[:400], wide))
    # a loss falling over more than two decades gets a log axis
    x = rng.normal(size=(400, 2))
    jw, _ = train_eval("wide", "mse", 1, x, (30 * x[:, :1]).astype(np.float32))
    if jw:
        lw = [float(line.split(",")[3]) for line in open(os.path.join(d, "wide", "metrics.csv")).read().splitlines()[1:]]
        svg = open(os.path.join(d, "wide", "curves.svg")).read()
        report("train_curves_log_axis", max(lw) / min(v for v in lw if v > 0) > 100 and "(log scale)" in svg
               and "MSE loss (log)" in svg, (max(lw), min(lw), svg[:300]))
    card = open(os.path.join(d, "reg", "card.md")).read()
    report("train_regression_card", "| validation | MAE | RMSE | R² |" in card and "mean of the labels (baseline)" in card, card[-600:])
    report("eval_mae_vs_sklearn", near(j.get("mae"), skm.mean_absolute_error(yt, yp)), (j.get("mae"),))
    report("eval_rmse_vs_sklearn", near(j.get("rmse"), skm.mean_squared_error(yt, yp) ** 0.5), (j.get("rmse"),))
    report("eval_r2_vs_sklearn", near(j.get("r2"), skm.r2_score(yt, yp)), (j.get("r2"), skm.r2_score(yt, yp)))
    base = np.full_like(yt, yt.mean())
    report("eval_mean_baseline_vs_sklearn", near(j["baseline"]["mae"], skm.mean_absolute_error(yt, base)) and
           near(j["baseline"]["rmse"], skm.mean_squared_error(yt, base) ** 0.5), j.get("baseline"))
    r = subprocess.run([KEEL, "eval", "reg", "--data", "reg_x.npy,reg_y.npy"], cwd=d, capture_output=True, text=True)
    report("eval_regression_text", r.returncode == 0 and "mean predictor" in r.stdout and "r2" in r.stdout, r.stdout[-400:])
