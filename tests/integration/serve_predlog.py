"""The prediction log (docs/monitoring.md, "Prediction log") through the real
server: `keel serve --log-predictions DIR` appends every answered request
(:predict with one or several records, with and without an id, and v2
infer) exactly once to DIR/ctr/predictions, rotated by period (2 s here),
with keel's manifest (keel data validate), and the labels posted to
.../feedback to DIR/ctr/labels. The logged raw record, outputs and feature
vector equal what the server answered and what `keel features apply` computes
from the joined dataset; DuckDB (npm @duckdb/node-api) reads the log;
`keel data join-log` + `features apply` + `train` retrain on it; SIGTERM
writes what is gathered; a restart appends; a queue of one entry drops and
counts (keel_prediction_log_dropped_total) while every request is served;
`keel monitor report` writes a self-contained HTML report with its sections;
bad options and a damaged manifest are clear errors."""
import calendar
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylib"))
from helpers import KEEL, Server, check, clicks_model_spec, clicks_model_steps, done, sha256, tmpdir  # noqa: E402
import duckdb_npm  # noqa: E402

SRC = os.environ.get("KEEL_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NPM = os.path.join(SRC, "build", "npm")
d = tmpdir("predlog-")


def keel(*args, timeout=300):
    return subprocess.run([os.path.abspath(KEEL) if os.path.exists(KEEL) else KEEL] + list(args), cwd=d,
                          capture_output=True, text=True, timeout=timeout)


def rows_of(path):
    r = keel("data", "head", path, "-n", "1000000", "--json")
    if r.returncode != 0:
        raise RuntimeError("keel data head %s: %s" % (path, r.stderr[-400:]))
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


def metric(text, name):
    m = re.search(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


with open(os.path.join(d, "retrain.yaml"), "w") as f:
    f.write(clicks_model_spec("jf"))
for name, args in clicks_model_steps(d) + [("live", ["data", "gen-clicks", "live.csv", "--rows", "2000", "--seed", "9"])]:
    r = keel(*args)
    if not check("predlog_setup_" + name, r.returncode == 0, r.stderr[-400:]):
        done()
meta = json.load(open(os.path.join(d, "model", "meta.json")))
repo = os.path.join(d, "repo")
os.makedirs(os.path.join(repo, "ctr", "1"))
for fn in list(meta["files"]) + ["meta.json"]:
    shutil.copy(os.path.join(d, "model", fn), os.path.join(repo, "ctr", "1"))
with open(os.path.join(repo, "ctr", "config.yaml"), "w") as f:
    f.write("monitor: {psi: 0.25}\n")   # the report's drift table uses the served thresholds

live = list(csv.DictReader(open(os.path.join(d, "live.csv"))))


def record(r):
    return {"item_price": float(r["item_price"]) if r["item_price"] else None, "category": r["category"],
            "ts": r["ts"].replace(" ", "T") + "Z"}


# ---------------------------------------------------------------- A: traffic through one server
log = os.path.join(d, "log")
srv = Server(repo, "--log-predictions", log, "--log-flush", "0.3", "--log-rotate", "2")
sent = {}          # request id -> (records, answer)
errors = []
lock = threading.Lock()


def client(ids):
    conn = srv.conn()
    for rid, body, path in ids:
        st, _, ans = srv.json("POST", path, body, conn=conn)
        with lock:
            if st != 200:
                errors.append((rid, st, ans))
            sent[rid] = (body, ans)


waves = []
for w in range(3):   # three waves 2.2 s apart: at least two rotation periods of 2 s
    wave = []
    for i in range(100):
        k = w * 100 + i
        wave.append(("p%d" % k, {"id": "p%d" % k, "instances": [record(live[k])]}, "/v1/models/ctr:predict"))
    for i in range(7):
        k = w * 7 + i
        recs = [record(live[1000 + 3 * k + j]) for j in range(3)]
        wave.append(("m%d" % k, {"id": "m%d" % k, "instances": recs}, "/v1/models/ctr:predict"))
    for i in range(17):
        k = w * 17 + i
        vec = [((k * 7 + j) % 11) / 10.0 for j in range(9)]
        wave.append(("v%d" % k, {"id": "v%d" % k, "inputs": [{"name": "input", "shape": [1, 9], "datatype": "FP32",
                                                             "data": vec}]}, "/v2/models/ctr/infer"))
    for i in range(3):
        wave.append(("anon%d-%d" % (w, i), {"instances": [record(live[1500 + w * 3 + i])]}, "/v1/models/ctr:predict"))
    waves.append(wave)
t_start = time.time()
for w, wave in enumerate(waves):
    ths = [threading.Thread(target=client, args=(wave[t::4],)) for t in range(4)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    if w < 2:
        time.sleep(2.2)
check("predlog_requests_served", not errors, errors[:3])
# labels: p0..p199 in one batch, p0 again (a later label replaces it), p200 alone, one id never served
labels = [{"id": "p%d" % k, "label": int(live[k]["clicked"])} for k in range(200)]
st1, _, a1 = srv.json("POST", "/v2/models/ctr/feedback", labels)
st2, _, a2 = srv.json("POST", "/v2/models/ctr/feedback", {"id": "p0", "label": 1 - int(live[0]["clicked"])})
st3, _, a3 = srv.json("POST", "/v2/models/ctr/feedback", {"feedback": [{"id": "p200", "label": 1}, {"id": "nope", "label": 0}]})
check("predlog_feedback_logged_without_in_server_feedback", (st1, st2, st3) == (200, 200, 200) and a1 == {"logged": True},
      (st1, a1, st2, a2, st3, a3))
st, _, bad = srv.json("POST", "/v2/models/ctr/feedback", "{not json")
check("predlog_feedback_bad_json_400", st == 400, (st, bad))
time.sleep(1.2)  # the writer's flush interval (0.3 s) and a rotation period boundary
_, _, mtext = srv.req("GET", "/metrics")
mtext = mtext.decode()
n_expected = sum(len(b.get("instances", [1])) for b, _ in sent.values())
check("predlog_metrics", metric(mtext, "keel_prediction_log_dropped_total") == 0 and
      metric(mtext, "keel_prediction_log_errors_total") == 0 and
      'keel_prediction_log_rows_total{dataset="predictions"} %d' % n_expected in mtext,
      [l for l in mtext.splitlines() if "prediction_log" in l and not l.startswith("#")])
rc = srv.stop()
check("predlog_server_exits_0", rc == 0, (rc, open(srv.log_path).read()[-600:]))

pdir = os.path.join(log, "ctr", "predictions")
P = rows_of(pdir)
by_id = {}
for r in P:
    by_id.setdefault(r["request_id"], []).append(r)
named = {k for k in sent if not k.startswith("anon")}
anon_rows = [r for r in P if r["request_id"] not in named]
once = all(sorted(x["record"] for x in by_id.get(k, [])) == list(range(len(sent[k][0].get("instances", [1]))))
           for k in named)
check("predlog_every_request_once", once and len(P) == n_expected and len(anon_rows) == 9 and
      len({r["request_id"] for r in anon_rows}) == 9,
      (len(P), n_expected, len(anon_rows), [k for k in named if k not in by_id][:5]))
ok = True
why = None
for k, (body, ans) in sent.items():
    if k.startswith("anon") or k.startswith("v"):
        continue
    rows = sorted(by_id[k], key=lambda r: r["record"])
    for j, r in enumerate(rows):
        want_out = ans["predictions"][j]
        if json.loads(r["input"]) != body["instances"][j] or abs(r["output"] - want_out) > 1e-6 * max(1, abs(want_out)) \
                or r["endpoint"] != "predict" or r["model_version"] != 1 or r["category"] != body["instances"][j]["category"]:
            ok, why = False, (k, j, r, want_out)
            break
    if not ok:
        break
check("predlog_predict_rows_equal_answers", ok, why)
ok = True
for k in (k for k in sent if k.startswith("v")):
    r = by_id[k][0]
    body, ans = sent[k]
    vec = body["inputs"][0]["data"]
    slots = [r[c] for c in r if c.startswith("feature.")]
    logged_in = json.loads(r["input"]).get("input", [])
    if r["endpoint"] != "infer" or len(logged_in) != 9 or any(abs(a - b) > 1e-6 for a, b in zip(logged_in, vec)) or \
            any(abs(a - b) > 1e-6 for a, b in zip(slots, vec)) or abs(r["output"] - ans["outputs"][0]["data"][0]) > 1e-6:
        ok, why = False, (k, r)
        break
check("predlog_infer_rows_equal_answers", ok, why)
check("predlog_latency_logged", all(r["latency_ms"] is not None and 0 <= r["latency_ms"] < 10000 for r in P),
      [r["latency_ms"] for r in P[:5]])

# rotation: parts under hour=... folders, none spanning a 2 s period; manifest valid
parts = []
for root, _, files in os.walk(pdir):
    parts += [os.path.join(root, x) for x in files if x.endswith(".parquet")]
stamps = set()
span_ok = True
for part in parts:
    m = re.search(r"hour=(\d{4}-\d\d-\d\dT\d\d)/part-(\d{8}T\d{6})-\d+\.parquet$", part)
    if not m:
        span_ok = False
        continue
    start = calendar.timegm(time.strptime(m.group(2), "%Y%m%dT%H%M%S"))
    stamps.add(start)
    for r in rows_of(part):
        t = calendar.timegm(time.strptime(r["served_at"][:19], "%Y-%m-%dT%H:%M:%S")) + float("0." + r["served_at"][20:26])
        if not (start <= t < start + 2) or m.group(1) != time.strftime("%Y-%m-%dT%H", time.gmtime(start)):
            span_ok = False
check("predlog_rotation", len(stamps) >= 2 and span_ok, (sorted(stamps), parts[:4]))
r = keel("data", "validate", pdir)
check("predlog_manifest_validates", r.returncode == 0, r.stdout + r.stderr)
man = json.load(open(os.path.join(pdir, "manifest.json")))
check("predlog_manifest_lists_parts", man["format"] == "keel-prediction-log-1" and man["model"] == "ctr" and
      len(man["files"]) == len(parts) and man["rows"]["accepted"] == n_expected, man)
check("predlog_keeps_version_files",
      sha256(os.path.join(log, "ctr", "versions", "1", "profile.json")) == sha256(os.path.join(repo, "ctr", "1", "profile.json"))
      and os.path.exists(os.path.join(log, "ctr", "versions", "1", "features.json")) and
      json.load(open(os.path.join(log, "ctr", "versions", "1", "monitor.json")))["thresholds"]["psi"] == 0.25)
L = rows_of(os.path.join(log, "ctr", "labels"))
check("predlog_labels_logged", len(L) == 203 and {r["request_id"] for r in L} >= {"p0", "p199", "p200", "nope"}, len(L))

# DuckDB reads the log
ok, why = duckdb_npm.ensure_duckdb(NPM)
if check("predlog_duckdb_available", ok, why):
    env = dict(os.environ, DUCKDB_NODE_PATH=os.path.join(NPM, "node_modules"))
    q = ("select count(*) as n, count(distinct request_id) as ids, sum(output) as s, "
         "sum(\"feature.price_z\") as z from read_parquet('%s/**/*.parquet', union_by_name=true)" % pdir)
    r = subprocess.run(["node", os.path.join(SRC, "tests", "integration", "ingest_duckdb.mjs"), "query", q],
                       capture_output=True, text=True, env=env, timeout=300)
    try:
        got = json.loads(r.stdout)[0]
        s_ours = sum(x["output"] for x in P)
        z_ours = sum(x["feature.price_z"] for x in P)
        check("predlog_duckdb_reads", int(got["n"]) == len(P) and int(got["ids"]) == len(by_id) and
              abs(float(got["s"]) - s_ours) < 1e-3 * max(1, abs(s_ours)) and
              abs(float(got["z"]) - z_ours) < 1e-3 * max(1, abs(z_ours)), (got, len(P), s_ours, z_ours))
    except (ValueError, IndexError, KeyError) as e:
        check("predlog_duckdb_reads", False, "%s: %s %s" % (e, r.stdout[-300:], r.stderr[-300:]))

# ---------------------------------------------------------------- B: join-log, features apply, train
r = keel("data", "join-log", "log", "--model", "ctr", "--out", "joined", "--features", "f/features.json", "--json")
res = json.loads(r.stdout) if r.returncode == 0 else {}
check("predlog_join_log_counts", res.get("joined") == 201 and res.get("labels") == 203 and
      res.get("replaced_labels") == 1 and res.get("unmatched_labels") == 1, (r.stdout, r.stderr[-300:]))
J = rows_of(os.path.join(d, "joined"))
jp0 = [x for x in J if x["request_id"] == "p0"]
check("predlog_join_later_label_wins", len(jp0) == 1 and jp0[0]["clicked"] == 1 - int(live[0]["clicked"]), jp0)
check("predlog_join_label_typed", all(isinstance(x["clicked"], int) for x in J) and
      all(x["record"] == 0 for x in J), J[:1])
r = keel("features", "apply", "f/features.json", "--data", "joined", "--out", "jf")
if check("predlog_apply_on_joined", r.returncode == 0, r.stderr[-400:]):
    JF = rows_of(os.path.join(d, "jf"))
    slot_names = [c for c in JF[0] if c != "clicked"]
    same = len(JF) == len(J) and all(
        all(a["feature." + s] == b[s] for s in slot_names) and a["clicked"] == b["clicked"] for a, b in zip(J, JF))
    check("predlog_feature_vector_equals_apply", same and len(slot_names) == 9, (len(JF), len(J), slot_names))
    r = keel("train", "retrain.yaml", "--out", "retrained")
    check("predlog_train_on_joined", r.returncode == 0 and os.path.exists(os.path.join(d, "retrained", "model.onnx")),
          r.stderr[-400:])
r = keel("data", "join-log", "log", "--model", "ctr", "--out", "joined", "--features", "f/features.json")
check("predlog_join_log_replaces_its_output", r.returncode == 0, r.stderr[-300:])
r = keel("data", "join-log", "log", "--model", "ctr", "--out", "f", "--features", "f/features.json")
check("predlog_join_log_refuses_other_folder", r.returncode == 1 and "not an earlier join-log output" in r.stderr,
      r.stderr[-300:])

# ---------------------------------------------------------------- E: the report
r = keel("monitor", "report", "--log", "log", "--out", "report.html")
html = open(os.path.join(d, "report.html")).read() if r.returncode == 0 else ""
check("predlog_report_written", r.returncode == 0, r.stderr[-400:])
check("predlog_report_sections", all(s in html for s in (
    "<h2>Model ctr", "<h3>Version 1", "class=\"drift\"", "Thresholds: PSI", "class=\"ref\"", "class=\"live\"",
    "Quality over time", "Latency over time", "item_price", "cat=books", "201 labelled",
    "PSI &ge; 0.25", "the thresholds this version was served with")), html[:300])
check("predlog_report_self_contained", "<script" not in html and not re.search(r"(src|href)=\"https?:", html) and
      "<link" not in html, re.findall(r"(?:src|href)=\"[^\"]*", html)[:3])
r = keel("monitor", "report", "--log", "log", "--since", "2099-01-01T00:00Z", "--out", "later.html")
check("predlog_report_since", r.returncode == 0 and
      "No predictions in the log for this period" in open(os.path.join(d, "later.html")).read(), r.stderr[-300:])
r = keel("monitor", "report", "--log", "log", "--since", "yesterday")
check("predlog_report_bad_since_usage", r.returncode == 2 and "--since" in r.stderr, r.stderr[-300:])
r = keel("monitor", "report", "--log", "f")
check("predlog_report_no_log_error", r.returncode == 1 and "no prediction log" in r.stderr, r.stderr[-300:])

# ---------------------------------------------------------------- C: SIGTERM writes what is gathered; a restart appends
log2 = os.path.join(d, "log2")
srv = Server(repo, "--log-predictions", log2, "--log-flush", "3600")
conn = srv.conn()
for i in range(50):
    srv.req("POST", "/v1/models/ctr:predict", {"id": "s%d" % i, "instances": [record(live[i])]}, conn=conn)
rc = srv.stop()
n1 = len(rows_of(os.path.join(log2, "ctr", "predictions"))) if rc == 0 else -1
check("predlog_sigterm_flush", rc == 0 and n1 == 50, (rc, n1))
srv = Server(repo, "--log-predictions", log2, "--log-flush", "3600")
for i in range(10):
    srv.req("POST", "/v1/models/ctr:predict", {"id": "t%d" % i, "instances": [record(live[i])]})
rc = srv.stop()
r = keel("data", "validate", os.path.join(log2, "ctr", "predictions"))
check("predlog_restart_appends", rc == 0 and len(rows_of(os.path.join(log2, "ctr", "predictions"))) == 60 and
      r.returncode == 0, r.stdout + r.stderr)

# a part a crash left unlisted (written whole, manifest not yet rewritten) is listed by the next run; kill -9
# loses only what was not flushed yet
p2 = os.path.join(log2, "ctr", "predictions")
first = sorted(os.path.join(r_, f_) for r_, _, fs in os.walk(p2) for f_ in fs if f_.endswith(".parquet"))[0]
stray = os.path.join(os.path.dirname(first), "part-20000101T000000-999999.parquet")
shutil.copy(first, stray)
n_stray = len(rows_of(stray))
srv = Server(repo, "--log-predictions", log2, "--log-flush", "0.2")
for i in range(5):
    srv.req("POST", "/v1/models/ctr:predict", {"id": "k%d" % i, "instances": [record(live[i])]})
time.sleep(0.8)
srv.p.kill()
srv.p.wait()
r = keel("data", "validate", p2)
n3 = len(rows_of(p2))
check("predlog_unlisted_part_listed_kill9_keeps_flushed", r.returncode == 0 and n3 == 60 + n_stray + 5,
      (n3, 60 + n_stray + 5, r.stdout[-300:] + r.stderr[-300:]))

# ---------------------------------------------------------------- D: a full queue drops and counts, serving goes on
log3 = os.path.join(d, "log3")
srv = Server(repo, "--log-predictions", log3, "--log-queue", "1", "--log-flush", "0.2")
sent.clear()
errors.clear()
batch = [("q%d" % i, {"id": "q%d" % i, "instances": [record(live[i % 2000])]}, "/v1/models/ctr:predict")
         for i in range(800)]
t0 = time.time()
ths = [threading.Thread(target=client, args=(batch[t::8],)) for t in range(8)]
for t in ths:
    t.start()
for t in ths:
    t.join()
elapsed = time.time() - t0
time.sleep(0.6)
_, _, mtext = srv.req("GET", "/metrics")
dropped = metric(mtext.decode(), "keel_prediction_log_dropped_total")
rc = srv.stop()
logged = len(rows_of(os.path.join(log3, "ctr", "predictions")))
check("predlog_queue_full_serves", not errors and len(sent) == 800, (errors[:3], elapsed))
check("predlog_queue_full_counted", rc == 0 and dropped and dropped > 0 and logged + dropped == 800,
      (dropped, logged))

# ---------------------------------------------------------------- F: bad input
r = keel("serve", repo, "--log-predictions", log, "--log-queue", "0")
check("predlog_bad_queue_usage", r.returncode == 2 and "--log-queue" in r.stderr, r.stderr[-200:])
r = keel("serve", repo, "--log-predictions", log, "--log-rotate", "0.5")
check("predlog_bad_rotate_usage", r.returncode == 2 and "--log-rotate" in r.stderr, r.stderr[-200:])
with open(os.path.join(log, "ctr", "labels", "manifest.json"), "w") as f:
    f.write('{"format": "keel-prediction-log-1", "files": [{"path": "x.parquet", "sha256": "zz"}]}')
r = keel("data", "join-log", "log", "--model", "ctr", "--out", "joined2")
check("predlog_join_damaged_manifest_error", r.returncode == 1 and "labels" in r.stderr and "manifest.json" in r.stderr,
      r.stderr[-300:])
r = keel("data", "join-log", "log", "--model", "nosuch", "--out", "joined3")
check("predlog_join_unknown_model_error", r.returncode == 1 and "nosuch" in r.stderr, r.stderr[-300:])
done()
