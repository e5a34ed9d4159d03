"""keel serve out of the box (no config.yaml, no flags but --port 0): dynamic
batching is on for a model whose inputs and outputs all have a free batch
dimension (model metadata, the start-up line, batches of several rows in
keel_inference_batch_size under concurrent load) and off for a model whose
batch dimension is fixed and for one whose config.yaml says
`dynamic_batching: false` (every batch one request); one HTTP loop per core
of the thread-count setting (KEEL_THREADS moves it); the access log, on by
default, holds one complete line per answered request — v2 infer, :predict
and errors — after a concurrent burst and after a SIGTERM that drains
requests in flight (a long run on a worker included). Starts the real binary."""
import collections
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import KEEL, Server, check, done, tmpdir, write_mlp  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto as TP, helper, numpy_helper  # noqa: E402

d = tmpdir("serve-defaults-")
repo = os.path.join(d, "repo")
write_mlp(os.path.join(repo, "mlp", "1", "model.onnx"), seed=1, sizes=(16, 8, 4))               # [N, 16]: batchable
write_mlp(os.path.join(repo, "fixed", "1", "model.onnx"), seed=2, sizes=(16, 8, 4), batch=1)    # [1, 16]: not
write_mlp(os.path.join(repo, "off", "1", "model.onnx"), seed=3, sizes=(16, 8, 4))               # batchable, turned off
with open(os.path.join(repo, "off", "config.yaml"), "w") as f:
    f.write("dynamic_batching: false\n")
# slow: 12 MatMuls by a 1024x1024 weight, so a 96-row request runs on a worker for a good while
w = (np.random.default_rng(0).standard_normal((1024, 1024)) / 32).astype(np.float32)
g = helper.make_graph([helper.make_node("MatMul", ["x" if i == 0 else "h%d" % (i - 1), "w"], ["y" if i == 11 else "h%d" % i])
                       for i in range(12)], "slow", [helper.make_tensor_value_info("x", TP.FLOAT, ["N", 1024])],
                      [helper.make_tensor_value_info("y", TP.FLOAT, ["N", 1024])], [numpy_helper.from_array(w, "w")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
os.makedirs(os.path.join(repo, "slow", "1"))
onnx.save(m, os.path.join(repo, "slow", "1", "model.onnx"))


# ctr: a features.json in front of the model, for :predict
def keel(*args):
    return subprocess.run([KEEL] + list(args), cwd=d, capture_output=True, text=True, timeout=300)


with open(os.path.join(d, "clicks.yaml"), "w") as f:
    f.write("name: clicks\ncolumns:\n  - {name: user_id, type: int64, nullable: false, min: 1}\n"
            "  - {name: item_price, type: float64, min: 0, max_null_ratio: 0.05}\n"
            "  - {name: ts, type: timestamp, timezone: UTC, nullable: false}\n"
            "  - {name: category, type: category, nullable: false, values: [books, toys, home, sports, garden, beauty]}\n"
            "  - {name: clicked, type: bool, nullable: false}\n")
with open(os.path.join(d, "spec.yaml"), "w") as f:
    f.write("label: {column: clicked, type: bool}\nfeatures:\n"
            "  - {name: price_z, transform: standardize, input: item_price, type: float64, fill: 0}\n"
            "  - {name: hour, transform: datepart, input: ts, type: timestamp, part: hour}\n")
for step, args in (("gen_clicks", ["data", "gen-clicks", "clicks.csv", "--rows", "300", "--seed", "3"]),
                   ("ingest", ["ingest", "clicks.csv", "--schema", "clicks.yaml", "--out", "ds"]),
                   ("fit", ["features", "fit", "spec.yaml", "--data", "ds", "--out", "f.json"])):
    r = keel(*args)
    if not check("serve_defaults_setup_" + step, r.returncode == 0, r.stderr[-400:]):
        done()
width = json.load(open(os.path.join(d, "f.json"))).get("width", 2)
write_mlp(os.path.join(repo, "ctr", "1", "model.onnx"), seed=4, sizes=(width, 8, 2))
os.rename(os.path.join(d, "f.json"), os.path.join(repo, "ctr", "1", "features.json"))

x = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32).flatten().tolist()
REC = {"user_id": 5, "item_price": 12.5, "ts": "2024-01-01T10:00:00Z", "category": "books", "clicked": True}


def metric_sum(text, name, model):
    rx = re.compile(r'%s\{model="%s",version="[^"]*"\} (\S+)$' % (re.escape(name), re.escape(model)))
    return sum(float(mm.group(1)) for mm in map(rx.match, text.splitlines()) if mm)


def request(kind, i):
    """(path, body) of request i of a kind; its expected answer is the kind's"""
    if kind == "mlp":
        return "/v2/models/mlp/infer", {"id": "d-%d" % i, "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16], "data": x}]}
    if kind in ("fixed", "off"):
        return "/v2/models/%s/infer" % kind, {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16], "data": x}]}
    if kind == "bad":      # a 400 naming the shape
        return "/v2/models/mlp/infer", {"id": "d-%d" % i, "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 15], "data": x[:15]}]}
    if kind == "nosuch":   # 404
        return "/v2/models/nosuch/infer", {"inputs": []}
    if kind == "predict":
        return "/v1/models/ctr:predict", {"instances": [REC]}
    return "/v1/models/ctr:predict", {"instances": [{"user_id": "five"}]}   # predict_bad: 400


KINDS = ["mlp", "mlp", "mlp", "fixed", "off", "bad", "nosuch", "predict", "predict_bad"]
MODEL = {"mlp": "mlp", "bad": "mlp", "fixed": "fixed", "off": "off", "nosuch": "nosuch", "predict": "ctr", "predict_bad": "ctr"}


def burst(s, threads, per_thread, answers, stop_on_503=False):
    """threads keep-alive clients, each sending per_thread requests of rotating kinds;
    answers gets (model, status) of every answered request"""
    lock = threading.Lock()

    def run(k):
        c = s.conn()
        for j in range(per_thread):
            i = k * per_thread + j
            kind = KINDS[i % len(KINDS)]
            path, body = request(kind, i)
            try:
                st, _, _ = s.req("POST", path, body, conn=c)
            except OSError:   # the server went away (SIGTERM): no answer, nothing to log
                return
            with lock:
                answers.append((MODEL[kind], st))
            if stop_on_503 and st == 503:
                return
        c.close()
    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    [t.start() for t in ts]
    return ts


def log_records(text):
    """(records of request lines, lines that are not whole JSON objects)"""
    recs, torn = [], []
    for line in text.splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            torn.append(line)
            continue
        if o.get("msg") == "request":
            recs.append(o)
    return recs, torn


cores = int(os.environ["KEEL_THREADS"]) if os.environ.get("KEEL_THREADS") else len(os.sched_getaffinity(0))
s = Server(repo)
try:
    log = s.logtext()
    check("serve_defaults_loops_per_core", "%d HTTP loop(s)" % min(cores, 64) in log and "access log on" in log,
          [ln for ln in log.splitlines() if "HTTP loop" in ln])
    meta = {mname: s.json("GET", "/v2/models/" + mname)[2] for mname in ("mlp", "fixed", "off")}
    par = {k: (v or {}).get("parameters", {}) for k, v in meta.items()}
    check("serve_defaults_batching_on_in_metadata", par["mlp"].get("dynamic_batching") is True
          and par["mlp"].get("max_batch_size") == 32 and par["mlp"].get("max_queue_delay_us") == 500, par["mlp"])
    check("serve_defaults_no_batching_without_free_dim", par["fixed"].get("dynamic_batching") is False, par["fixed"])
    check("serve_defaults_config_turns_batching_off", par["off"].get("dynamic_batching") is False, par["off"])
    check("serve_defaults_startup_lines",
          "model mlp version 1 ready" in log and "dynamic batching: up to 32 rows, 500 us delay" in log
          and re.search(r"model fixed version 1 ready \([^\n]*no dynamic batching: no free batch dimension", log) is not None
          and re.search(r"model off version 1 ready \([^\n]*no dynamic batching: off in config.yaml", log) is not None,
          [ln for ln in log.splitlines() if "ready (" in ln])

    # a concurrent burst of every kind of request
    answers = []
    for t in burst(s, 12, 45, answers):
        t.join()
    want = {"mlp": 200, "fixed": 200, "off": 200, "bad": 400, "nosuch": 404, "predict": 200, "predict_bad": 400}
    check("serve_defaults_burst_answered", len(answers) == 12 * 45
          and set(answers) == {(MODEL[k], st) for k, st in want.items()}, collections.Counter(answers))
    st, _, text = s.req("GET", "/metrics")
    text = text.decode()
    bs = {mname: (metric_sum(text, "keel_inference_batch_size_sum", mname), metric_sum(text, "keel_inference_batch_size_count", mname))
          for mname in ("mlp", "fixed", "off")}
    check("serve_defaults_batches_of_several_rows", bs["mlp"][1] > 0 and bs["mlp"][0] > bs["mlp"][1], bs["mlp"])
    check("serve_defaults_unbatched_models_run_one_by_one", all(bs[mname][1] > 0 and bs[mname][0] == bs[mname][1]
                                                               for mname in ("fixed", "off")), bs)
    time.sleep(0.3)   # idle loops: their buffered lines are out
    recs, torn = log_records(s.logtext())
    logged = collections.Counter((r["model"], r["status"]) for r in recs)
    check("serve_defaults_log_one_line_per_request", logged == collections.Counter(answers) and not torn,
          (logged, collections.Counter(answers), torn[:2]))
    ids = [r["request_id"] for r in recs if str(r["request_id"]).startswith("d-")]
    check("serve_defaults_log_ids_once", len(ids) == len(set(ids)) and len(ids) == sum(
        1 for i in range(12 * 45) if KINDS[i % len(KINDS)] in ("mlp", "bad")), len(ids))

    # SIGTERM while requests are in flight: a long run on a worker, and clients sending
    n_before = len(recs)
    slow = {}

    def run_slow():
        xs = np.ones((96, 1024), np.float32).flatten().tolist()
        slow["st"] = s.req("POST", "/v2/models/slow/infer", {"id": "slow-1", "inputs": [
            {"name": "x", "datatype": "FP32", "shape": [96, 1024], "data": xs}]}, conn=s.conn(timeout=60))[0]
    ts_slow = threading.Thread(target=run_slow)
    ts_slow.start()
    answers2 = []
    ts = burst(s, 8, 100000, answers2, stop_on_503=True)
    running = 0
    for _ in range(200):   # until the long run is on a worker
        st, _, text = s.req("GET", "/metrics")
        m2 = re.search(r'^keel_inference_running\{model="slow"\} (\S+)$', text.decode(), re.M)
        running = float(m2.group(1)) if m2 else 0
        if running >= 1:
            break
        time.sleep(0.01)
    s.signal(signal.SIGTERM)
    for t in ts + [ts_slow]:
        t.join(60)
    rc = s.stop()
    recs2, torn2 = log_records(open(s.log_path).read())
    logged2 = collections.Counter((r["model"], r["status"]) for r in recs2[n_before:])
    sent2 = collections.Counter(answers2) + collections.Counter([("slow", slow.get("st"))])
    check("serve_defaults_drain_answers_the_long_run", rc == 0 and running >= 1 and slow.get("st") == 200,
          (rc, running, slow))
    check("serve_defaults_log_complete_after_sigterm", logged2 == sent2 and not torn2 and len(answers2) > 0
          and any(r["request_id"] == "slow-1" and r["status"] == 200 for r in recs2), (logged2, sent2, torn2[:2]))
finally:
    s.stop()

# the thread-count setting moves the loop count
s = Server(repo, env={"KEEL_THREADS": "3"})
try:
    check("serve_defaults_loops_follow_threads", "3 HTTP loop(s)" in s.logtext(),
          [ln for ln in s.logtext().splitlines() if "HTTP loop" in ln])
finally:
    s.stop()
done()
