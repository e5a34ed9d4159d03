"""The alert rules of `keel monitor rules` against the REAL server
(issue 29's detection and false-alarm goals): click-log traffic is replayed
through keel serve's :predict, /metrics is scraped, and Prometheus' own rule
engine (`promtool test rules`, every scraped sample held constant past the
alerts' `for:`) evaluates the generated rules at the default thresholds.
- Same distribution: 20 replays of 1,000 requests (one record each, fixed
  seed list, labels posted for each), evaluated after 100, 250, 500 and
  1,000 requests — at most 5 % of the evaluations raise any alert.
- Shifts: a 0.5 sigma mean shift of item_price, a new category at 20 %, nulls
  1 % -> 20 %, and labels making accuracy fall by 5 points (the true labels
  with the fewest flipped): each fires its alert within 1,000 requests
  (checked after 100, 250, 500 and 1,000)."""
import csv
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import KEEL, Server, check, clicks_model_steps, done, tmpdir  # noqa: E402
from promrules import held, keel_rules, parse_scrape, promtool, series_name, write_test  # noqa: E402

if not shutil.which("promtool"):
    check("monitor_alerts_promtool_installed", False, "promtool missing (Debian package prometheus, mk/packages.txt)")
    done()

d = tmpdir("alerts-")
SEEDS = list(range(101, 121))
CHECKPOINTS = (100, 250, 500, 1000)


def keel(*args):
    return subprocess.run([KEEL] + list(args), cwd=d, capture_output=True, text=True, timeout=300)


# ------------------------------------------------------------------ the model (helpers.clicks_model_steps)
steps = clicks_model_steps(d)
steps += [("live%d" % s, ["data", "gen-clicks", "live%d.csv" % s, "--rows", "1000", "--seed", str(s)]) for s in SEEDS]
steps += [("shiftdata", ["data", "gen-clicks", "shift.csv", "--rows", "4000", "--seed", "9"])]
for name, args in steps:
    r = keel(*args)
    if not check("alerts_setup_" + name, r.returncode == 0, r.stderr[-400:]):
        done()
meta = json.load(open(os.path.join(d, "model", "meta.json")))
ref_acc = meta["final_metrics"]["val_accuracy"]

# one model per replay (each its own live windows), all the same version; the defaults but feedback on
repo = os.path.join(d, "repo")
MODELS = ["same%d" % s for s in SEEDS] + ["shift", "newcat", "nulls", "accuracy"]
for m in MODELS:
    vdir = os.path.join(repo, m, "1")
    os.makedirs(vdir)
    for fn in list(meta["files"]) + ["meta.json"]:
        shutil.copy(os.path.join(d, "model", fn), vdir)
    with open(os.path.join(repo, m, "config.yaml"), "w") as f:
        f.write("monitor: {feedback_capacity: 10000}\n")
rules = []
for m in MODELS:
    rc, out, err = keel_rules(repo, m)
    rules.append(os.path.join(d, m + ".rules.yml"))
    with open(rules[-1], "w") as f:
        f.write(out)
    if not check("alerts_rules_" + m, rc == 0, err):
        done()


def rows_of(path):
    return list(csv.DictReader(open(os.path.join(d, path))))


def record(r, shift=0.0, cat=None, null=False):
    p = None if null or not r["item_price"] else float(r["item_price"]) + shift
    return {"item_price": p, "category": cat or r["category"], "ts": r["ts"].replace(" ", "T") + "Z"}


# ------------------------------------------------------------------ promtool over a scrape


def evaluate(model, metrics, expect, tag):
    """promtool test rules of model's rules over the scraped samples of model held constant;
    expect: [(PromQL, [labels of the expected series with value 1])]. Returns (ok, promtool output)."""
    samples = [(s, x) for s, x in parse_scrape(metrics) if 'model="%s"' % model in s]
    path = os.path.join(d, "%s-%s.test.yml" % (model, tag))
    write_test(path, [os.path.join(d, model + ".rules.yml")],
               [{"name": "%s %s" % (model, tag), "series": held(samples), "eval": "30m", "expect": expect}])
    rc, msg = promtool("test", "rules", path)
    return rc == 0, msg


def firing_count(alertname, **labels):
    sel = {"alertname": alertname, "alertstate": "firing"}
    sel.update(labels)
    return "clamp_max(count(%s), 1)" % series_name("ALERTS", sel)


def count_is_one(query):
    """expect: the count query holds (one sample, no labels; write_test puts ALERTS{} around labels)"""
    return [(query, ["{}"])]


srv = Server(repo, "--http-threads", "2", "--workers", "1", "--no-access-log", "--conn-timeout", "600")
try:
    conn = srv.conn()

    def predict(model, rec, rid):
        st, _, body = srv.json("POST", "/v1/models/%s:predict" % model, {"id": rid, "instances": [rec]}, conn=conn)
        if st != 200:
            raise RuntimeError("predict %s %d: %s" % (model, st, body))
        p = body["predictions"][0]
        return p[0] if isinstance(p, list) else p

    def feedback(model, pairs):
        st, _, ans = srv.json("POST", "/v2/models/%s/feedback" % model,
                              {"feedback": [{"id": i, "label": y} for i, y in pairs]}, conn=conn)
        if st != 200 or ans.get("matched") != len(pairs):
            raise RuntimeError("feedback %s: %d %s" % (model, st, ans))

    def scrape():
        return srv.req("GET", "/metrics", conn=conn)[2].decode()

    # 1. same distribution: any alert of a replay's model after 100, 250, 500 or 1,000 of its requests is a
    # false alarm (small windows included: the minimum sample sizes must keep them quiet)
    alarms, evaluations = [], 0
    sent = 0
    for cp in CHECKPOINTS:
        for s in SEEDS:
            m = "same%d" % s
            pairs = []
            for i, r in enumerate(rows_of("live%d.csv" % s)[sent:cp], start=sent):
                predict(m, record(r), "r%d" % i)
                pairs.append(("r%d" % i, int(r["clicked"])))
            feedback(m, pairs)
        sent = cp
        metrics = scrape()
        for s in SEEDS:
            m = "same%d" % s
            ok, msg = evaluate(m, metrics, [(series_name("ALERTS", {"alertstate": "firing"}), [])], "same%d" % cp)
            evaluations += 1
            if not ok:
                alarms.append((m, cp, [ln.strip()[:300] for ln in msg.splitlines() if "got:" in ln][:1] or [msg[-300:]]))
    rate = len(alarms) / evaluations
    drift = [a for a in alarms if "KeelModel" not in a[2][0] or "KeelFeature" in a[2][0] or "KeelPrediction" in a[2][0]]
    check("alerts_same_distribution_false_alarm_rate", rate <= 0.05, alarms[:6])
    print("same distribution: %d of %d evaluations (%d replays after %s requests) raised an alert (%.1f %%), "
          "%d of them a drift or data-quality alert: %s" %
          (len(alarms), evaluations, len(SEEDS), "/".join(map(str, CHECKPOINTS)), 100 * rate, len(drift),
           [(m, cp, g[0].split('alertname="')[1].split('"')[0]) for m, cp, g in alarms]))
    check("alerts_same_distribution_evaluated", 'keel_feature_window_samples{model="same101"' in metrics and
          'keel_model_quality_samples{model="same101",version="1",window="5m"} 1000' in metrics,
          [ln for ln in metrics.splitlines() if "samples" in ln][:4])

    # 2. shifts: the first checkpoint at which the alert fires
    shift_rows = rows_of("shift.csv")
    prices = [float(r["item_price"]) for r in shift_rows if r["item_price"]]
    mean = sum(prices) / len(prices)
    sd = (sum((x - mean) ** 2 for x in prices) / len(prices)) ** 0.5
    scenarios = [
        ("shift", lambda i, r: record(r, shift=0.5 * sd),
         [("KeelFeatureDriftKS", {"feature": "item_price", "source": "input", "window": "5m"})],
         'keel_feature_drift{model="shift",version="1",feature="item_price",source="input",window="5m",stat="ks'),
        ("newcat", lambda i, r: record(r, cat="gadgets" if i % 5 == 0 else None),
         [("KeelFeatureUnknownCategories", {"feature": "category", "window": "5m"}),
          ("KeelFeatureDriftChi2", {"feature": "category", "window": "5m"})],
         'keel_feature_drift{model="newcat",version="1",feature="category",source="input",window="5m",stat="'),
        ("nulls", lambda i, r: record(r, null=(i % 5 == 0)),
         [("KeelFeatureNullRatio", {"feature": "item_price", "window": "5m"})],
         'keel_feature_null_ratio{model="nulls",version="1",feature="item_price",source="input",window="'),
        ("accuracy", lambda i, r: record(r), [("KeelModelAccuracyDrop", {"metric": "accuracy", "window": "5m"})],
         'keel_model_quality{model="accuracy",version="1",metric="accuracy",window="'),
    ]
    for k, (m, make, alerts, show) in enumerate(scenarios):
        rows = shift_rows[k * 1000:(k + 1) * 1000]
        first = {a: None for a, _ in alerts}
        correct = posted = base = 0   # base: correct with the true labels
        sent = 0
        pending = []
        for cp in CHECKPOINTS:
            for i in range(sent, cp):
                z = predict(m, make(i, rows[i]), "q%d" % i)
                pending.append(("q%d" % i, int(rows[i]["clicked"]), 1 if z >= 0 else 0))
            sent = cp
            if m == "accuracy":   # the true labels, fewest flipped so that accuracy falls by 5 points
                base += sum(1 for _, y, pred in pending if y == pred)
                need = round(base - 0.05 * (posted + len(pending))) - correct
                right = [j for j, (_, y, pred) in enumerate(pending) if y == pred]
                wrong = [j for j, (_, y, pred) in enumerate(pending) if y != pred]
                flip = set(right[:len(right) - need] if len(right) > need else wrong[:need - len(right)])
                pairs = [(rid, 1 - y if j in flip else y) for j, (rid, y, _) in enumerate(pending)]
                correct += sum(1 for j, (rid, y) in enumerate(pairs) if y == pending[j][2])
                posted += len(pairs)
                feedback(m, pairs)
            else:
                feedback(m, [(rid, y) for rid, y, _ in pending])
            pending = []
            metrics = scrape()
            for a, lb in alerts:
                if first[a] is None:
                    ok, _ = evaluate(m, metrics, count_is_one(firing_count(a, **lb)), "%s-%d" % (a, cp))
                    if ok:
                        first[a] = cp
        for a, lb in alerts:
            check("alerts_%s_%s_within_1000" % (m, a), first[a] is not None and first[a] <= 1000, (first, lb))
        shown = [ln for ln in metrics.splitlines() if ln.startswith(show)]
        print("%s: %s first fire after %s requests; at 1,000: %s" % (m, ", ".join(a for a, _ in alerts),
                                                                     [first[a] for a, _ in alerts], shown))
        if m == "accuracy":
            print("accuracy: reference (validation rows) %.4f, the true labels %.4f, the labels posted %.4f" %
                  (ref_acc, base / posted, correct / posted))
    conn.close()
finally:
    srv.stop()
done()
