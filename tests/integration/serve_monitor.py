"""Monitoring inside keel serve (docs/monitoring.md): features fit writes
profile.json, training adds the model outputs and lists it in meta.json, the
server keeps live windowed sketches per version and compares them with the
profile. Replays click-log rows (fixed seeds) through :predict: the same
distribution raises no drift flag at the default thresholds; a 0.5 sigma mean
shift in item_price, a new category at 20 % of traffic and nulls rising from
~1 % to 20 % each raise their statistic past its threshold within 1,000
requests. Feedback: labels posted later are joined with the predictions the
requests got (by id) and the live AUC, accuracy, log-loss and Brier score
equal numpy's on the same pairs. Also: v2 infer updates the feature slots and the outputs, GET
.../monitor of a version without profile.json says monitoring is off,
config.yaml's monitor: block (windows, thresholds, unknown keys refused), and
/metrics with the drift gauges stays clean under promtool check metrics."""
import csv
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import KEEL, Server, check, clicks_model_steps, done, sha256, tmpdir  # noqa: E402

d = tmpdir("monitor-")


def keel(*args):
    return subprocess.run([KEEL] + list(args), cwd=d, capture_output=True, text=True, timeout=300)


steps = clicks_model_steps(d) + [("live", ["data", "gen-clicks", "live.csv", "--rows", "6000", "--seed", "9"])]
for name, args in steps:
    r = keel(*args)
    if not check("monitor_setup_" + name, r.returncode == 0, r.stderr[-400:]):
        done()

prof = json.load(open(os.path.join(d, "f", "profile.json")))
cols = {c["name"]: c for c in prof["columns"]}
check("monitor_fit_writes_profile", prof["format"] == "keel.profile/1" and cols["item_price"]["role"] == "input" and
      cols["category"]["kind"] == "categorical" and cols["price_z"]["role"] == "feature",
      sorted(cols))
check("monitor_apply_carries_profile", os.path.exists(os.path.join(d, "fds", "profile.json")))
meta = json.load(open(os.path.join(d, "model", "meta.json")))
mprof = json.load(open(os.path.join(d, "model", "profile.json")))
check("monitor_train_lists_profile_in_meta",
      meta["files"].get("profile.json", {}).get("sha256") == sha256(os.path.join(d, "model", "profile.json")), meta["files"])
outs = [c for c in mprof["columns"] if c["role"] == "output"]
check("monitor_train_profiles_outputs", len(outs) == 1 and outs[0]["count"] == 1200, [c["name"] for c in outs])

# the repository: ctr (monitored), old (the same model without profile.json, as before profiles)
repo = os.path.join(d, "repo")
for m in ("ctr", "old"):
    vdir = os.path.join(repo, m, "1")
    os.makedirs(vdir)
    for fn in list(meta["files"]) + ["meta.json"]:   # what keel pipeline's export copies
        shutil.copy(os.path.join(d, "model", fn), vdir)
with open(os.path.join(repo, "ctr", "config.yaml"), "w") as f:
    f.write("monitor: {windows: [5m, 1h, 24h], psi: 0.2, p_value: 0.001, min_samples: 100, feedback_capacity: 100000}\n")
os.remove(os.path.join(repo, "old", "1", "profile.json"))  # and not listed in its meta.json
om = dict(meta)
# and in the files shape keel train wrote before the one manifest shape (name -> hex): it still verifies and serves
om["files"] = {k: v["sha256"] for k, v in meta["files"].items() if k != "profile.json"}
json.dump(om, open(os.path.join(repo, "old", "1", "meta.json"), "w"))

rows = list(csv.DictReader(open(os.path.join(d, "live.csv"))))
prices = [float(r["item_price"]) for r in rows if r["item_price"]]
mean = sum(prices) / len(prices)
sd = (sum((x - mean) ** 2 for x in prices) / len(prices)) ** 0.5


def record(r, shift=0.0, cat=None, null=False):
    p = None if null or not r["item_price"] else float(r["item_price"]) + shift
    return {"item_price": p, "category": cat or r["category"], "ts": r["ts"].replace(" ", "T") + "Z"}


def column(mon, name, window="5m"):
    for c in mon["monitor"]["columns"]:
        if c["name"] == name:
            return c["windows"][window]
    return None


def replay(srv, recs, watch=None, every=50):
    """one record per :predict request; returns the request count at which
    watch(monitor) first held (None: never)"""
    conn = srv.conn()
    first = None
    for i, rec in enumerate(recs):
        st, _, body = srv.req("POST", "/v1/models/ctr:predict", {"instances": [rec]}, conn=conn)
        if st != 200:
            raise RuntimeError("predict %d: %s" % (st, body[:300]))
        if watch and first is None and (i + 1) % every == 0:
            _, _, mon = srv.json("GET", "/v2/models/ctr/monitor", conn=conn)
            if watch(mon):
                first = i + 1
    conn.close()
    return first


def scenario(name, recs, watch):
    srv = Server(repo, "--http-threads", "2", "--workers", "1", "--no-access-log")
    try:
        first = replay(srv, recs, watch)
        _, _, mon = srv.json("GET", "/v2/models/ctr/monitor")
        return first, mon, srv.req("GET", "/metrics")[2].decode()
    finally:
        srv.stop()


def flags(mon, window="5m"):
    return {c["name"]: c["windows"][window]["drift"] for c in mon["monitor"]["columns"] if c["windows"][window]["drift"]}


# 1. the same distribution (held-back rows of another seed): nothing flagged
first, mon, metrics = scenario("same", [record(r) for r in rows[:1000]], None)
check("monitor_same_distribution_no_drift", mon["monitoring"] and not flags(mon) and not flags(mon, "24h"), flags(mon))
check("monitor_counts_every_request", column(mon, "item_price")["n"] == 1000 and column(mon, "output")["n"] == 1000,
      column(mon, "item_price"))
check("monitor_windows_from_config", mon["monitor"]["windows"] == ["5m", "1h", "24h"], mon["monitor"]["windows"])
check("monitor_memory_bounded", 0 < mon["monitor"]["memory_max_bytes"] <= 64 << 20,
      (mon["monitor"]["memory_bytes"], mon["monitor"]["memory_max_bytes"]))
print("monitor memory: %d bytes now, at most %d bytes (every shard)" %
      (mon["monitor"]["memory_bytes"], mon["monitor"]["memory_max_bytes"]))
drift_lines = [ln for ln in metrics.splitlines() if ln.startswith("keel_feature_drift_detected{")]
check("monitor_metrics_no_drift_flag", drift_lines and all(ln.endswith(" 0") for ln in drift_lines),
      [ln for ln in drift_lines if not ln.endswith(" 0")][:3])
check("monitor_metrics_gauges", 'keel_feature_drift{model="ctr",version="1",feature="item_price",source="input",window="5m",stat="ks"}'
      in metrics and "keel_feature_null_ratio{" in metrics and "keel_prediction_drift{" in metrics,
      [ln for ln in metrics.splitlines() if "drift" in ln][:5])
if shutil.which("promtool"):
    p = subprocess.run(["promtool", "check", "metrics"], input=metrics, capture_output=True, text=True)
    check("monitor_metrics_promtool_clean", p.returncode == 0, p.stdout + p.stderr)
else:
    print("SKIP monitor_metrics_promtool_clean: promtool not installed")

# 2. a 0.5 sigma mean shift in one numeric input
first, mon, _ = scenario("shift", [record(r, shift=0.5 * sd) for r in rows[1000:2000]],
                         lambda m: "ks" in column(m, "item_price")["drift"])
check("monitor_mean_shift_caught_within_1000", first is not None and first <= 1000,
      (first, column(mon, "item_price")))
print("0.5 sigma shift: item_price ks flagged after %s requests (ks %.3f, psi %.3f)" %
      (first, column(mon, "item_price")["ks"], column(mon, "item_price")["psi"]))

# 3. a new category at 20 % of the traffic
recs = [record(r, cat="gadgets" if i % 5 == 0 else None) for i, r in enumerate(rows[2000:3000])]
first, mon, _ = scenario("category", recs, lambda m: "chi2" in column(m, "category")["drift"] and
                         "unknown_ratio" in column(m, "category")["drift"])
c = column(mon, "category")
check("monitor_new_category_caught_within_1000", first is not None and first <= 1000, (first, c))
check("monitor_unknown_ratio", abs(c["unknown_ratio"] - 0.2) < 0.01, c)
fb = mon["monitor"]["fallbacks"]["5m"]
check("monitor_fallbacks_unknown", fb["rows"] == 1000 and abs(fb["unknown_ratio"] - 0.2) < 0.01 and fb["ref_unknown_ratio"] == 0,
      fb)
print("new category at 20%%: flagged after %s requests (chi2 p %.3g, unknown %.3f)" % (first, c["chi2_p_value"], c["unknown_ratio"]))

# 4. nulls from ~1 % to 20 %
recs = [record(r, null=(i % 5 == 0)) for i, r in enumerate(rows[3000:4000])]
first, mon, _ = scenario("nulls", recs, lambda m: "null_ratio" in column(m, "item_price")["drift"])
c = column(mon, "item_price")
check("monitor_null_rate_caught_within_1000", first is not None and first <= 1000, (first, c))
print("nulls 1%% -> 20%%: flagged after %s requests (null ratio %.3f, reference %.3f)" % (first, c["null_ratio"], c["ref_null_ratio"]))

# 5. v2 infer: the feature slots and outputs of tensor requests; an old version says monitoring is off
srv = Server(repo, "--no-access-log")
try:
    st, _, body = srv.json("POST", "/v2/models/ctr/infer", {"inputs": [
        {"name": "x", "datatype": "FP32", "shape": [2, 9], "data": [0.1] * 18}]})
    if st != 200:  # the input's name is the exported model's
        _, _, md = srv.json("GET", "/v2/models/ctr")
        st, _, body = srv.json("POST", "/v2/models/ctr/infer", {"inputs": [
            {"name": md["inputs"][0]["name"], "datatype": "FP32", "shape": [2, 9], "data": [0.1] * 18}]})
    _, _, mon = srv.json("GET", "/v2/models/ctr/monitor")
    check("monitor_v2_infer_updates_slots", st == 200 and column(mon, "price_z")["n"] == 2 and
          column(mon, "output")["n"] == 2 and column(mon, "item_price")["n"] == 0, (st, body, column(mon, "price_z")))
    st, _, old = srv.json("GET", "/v2/models/old/monitor")
    check("monitor_old_version_unmonitored", st == 200 and old["monitoring"] is False and "profile.json" in old["reason"],
          (st, old))
    _, _, md = srv.json("GET", "/v2/models/old")  # verified by its old-shape meta.json, and it serves
    st, _, body = srv.json("POST", "/v2/models/old/infer", {"inputs": [
        {"name": md["inputs"][0]["name"], "datatype": "FP32", "shape": [1, 9], "data": [0.1] * 9}]})
    check("monitor_old_files_shape_serves", st == 200 and body["outputs"][0]["shape"][0] == 1, (st, body))
    st, _, fb = srv.json("POST", "/v2/models/old/feedback", {"id": "x", "label": 1})
    check("feedback_off_by_default", st == 400 and "feedback_capacity" in fb.get("error", ""), (st, fb))
    st, _, _ = srv.json("GET", "/v2/models/nosuch/monitor")
    check("monitor_unknown_model_404", st == 404, st)
    st, _, _ = srv.json("GET", "/v2/models/ctr/versions/7/monitor")
    check("monitor_unknown_version_404", st == 404, st)
finally:
    srv.stop()

# 6. feedback: labels that arrive later joined with the predictions the requests got
srv = Server(repo, "--no-access-log")
try:
    conn = srv.conn()
    logits, labels = [], []
    for i, r in enumerate(rows[4000:4400]):
        st, _, body = srv.json("POST", "/v1/models/ctr:predict", {"id": "q%d" % i, "instances": [record(r)]}, conn=conn)
        if st != 200 or body.get("id") != "q%d" % i:
            break
        logits.append(body["predictions"][0] if not isinstance(body["predictions"][0], list) else body["predictions"][0][0])
        labels.append(int(r["clicked"]))
    check("feedback_predict_echoes_id", len(logits) == 400, (st, body))
    batch = [{"id": "q%d" % i, "label": labels[i]} for i in range(0, 300)]
    st, _, ans = srv.json("POST", "/v2/models/ctr/feedback", {"feedback": batch}, conn=conn)
    check("feedback_batch_matched", st == 200 and ans.get("matched") == 300, (st, ans))
    for i in range(300, 400):   # single labels, as booleans
        srv.json("POST", "/v2/models/ctr/feedback", {"id": "q%d" % i, "label": bool(labels[i])}, conn=conn)
    st, _, ans = srv.json("POST", "/v2/models/ctr/feedback", [{"id": "q5", "label": 1}, {"id": "nosuch", "label": 0},
                                                              {"id": "q6", "label": 7}, {"label": 1}], conn=conn)
    check("feedback_counts_duplicate_unmatched_invalid", st == 200 and ans == {"matched": 0, "unmatched": 1, "late": 0,
          "duplicate": 1, "invalid": 2}, ans)
    st, _, _ = srv.json("POST", "/v2/models/ctr/feedback", "[{", conn=conn)
    check("feedback_malformed_400", st == 400, st)
    _, _, mon = srv.json("GET", "/v2/models/ctr/monitor", conn=conn)
    q = mon["quality"]
    import numpy as np
    z = np.array(logits, dtype=np.float64)
    y = np.array(labels, dtype=np.float64)
    p = 1 / (1 + np.exp(-z))
    acc = float(np.mean((p >= 0.5) == (y == 1)))
    ll = float(np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p))))
    brier = float(np.mean((p - y) ** 2))
    order = np.argsort(p, kind="mergesort")
    ranks = np.empty(len(p))
    ranks[order] = np.arange(1, len(p) + 1)
    for v in np.unique(p):   # ties: average ranks
        ranks[p == v] = ranks[p == v].mean()
    npos = y.sum()
    auc = float((ranks[y == 1].sum() - npos * (npos + 1) / 2) / (npos * (len(y) - npos)))
    w = q["windows"]["5m"]
    check("feedback_quality_equals_numpy", w["n"] == 400 and abs(w["accuracy"] - acc) < 1e-9 and
          abs(w["log_loss"] - ll) < 1e-4 and abs(w["brier"] - brier) < 1e-5 and abs(w["auc"] - auc) < 1e-6,
          (w, acc, ll, brier, auc))
    print("feedback: 400 labels, accuracy %.4f, AUC %.4f, log-loss %.4f, Brier %.4f (numpy: %.4f %.4f %.4f %.4f)" %
          (w["accuracy"], w["auc"], w["log_loss"], w["brier"], acc, auc, ll, brier))
    check("feedback_label_counts", q["labels"] == {"matched": 400, "unmatched": 1, "late": 0, "duplicate": 1, "invalid": 2},
          q["labels"])
    metrics = srv.req("GET", "/metrics", conn=conn)[2].decode()
    check("feedback_metrics", 'keel_model_quality{model="ctr",version="1",metric="auc",window="5m"}' in metrics and
          'keel_feedback_labels_total{model="ctr",version="1",result="matched"} 400' in metrics,
          [ln for ln in metrics.splitlines() if "quality" in ln or "feedback" in ln][:6])
    if shutil.which("promtool"):
        pr = subprocess.run(["promtool", "check", "metrics"], input=metrics, capture_output=True, text=True)
        check("feedback_metrics_promtool_clean", pr.returncode == 0, pr.stdout + pr.stderr)
    conn.close()
finally:
    srv.stop()

# 7. config.yaml: an unknown key of monitor: is refused with its position, the model is not served
with open(os.path.join(repo, "ctr", "config.yaml"), "w") as f:
    f.write("monitor:\n  windows: [5m]\n  psy: 0.3\n")
srv = Server(repo, "--no-access-log")
try:
    st, _, idx = srv.json("POST", "/v2/repository/index")
    ent = [x for x in idx if x["name"] == "ctr"]
    check("monitor_config_unknown_key_refused", ent and ent[0]["state"] != "READY" and "psy" in ent[0].get("reason", "") and
          "config.yaml:3" in ent[0].get("reason", ""), ent)
finally:
    srv.stop()
done()
