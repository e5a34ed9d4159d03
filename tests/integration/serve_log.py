"""keel serve's access log: one line per inference request, with the same
fields and layout as every other log line (JSON off a terminal,
KEEL_LOG_FORMAT=text for text), when the HTTP loops buffer the lines and
write a round of them at a time: every request of a concurrent burst (good
and bad ones, on two loops) is logged exactly once, the lines show up
within a fraction of a second while the server idles, and none is lost at
SIGTERM. Starts the real binary."""
import json
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import Server, check, done, tmpdir, write_mlp  # noqa: E402

import numpy as np  # noqa: E402

repo = tmpdir("serve-log-repo-")
write_mlp(os.path.join(repo, "mlp", "1", "model.onnx"), seed=4, sizes=(16, 8, 4))
with open(os.path.join(repo, "mlp", "config.yaml"), "w") as f:
    f.write("max_batch_size: 16\ndynamic_batching:\n  max_queue_delay_us: 300\n")
x = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)
FIELDS = ["ts", "level", "module", "msg", "request_id", "model", "version", "priority", "input_shapes", "batch_size",
          "queue_ms", "compute_ms", "total_ms", "status", "result"]


def logtext(s):
    with open(s.log_path) as f:
        return f.read()


def body(i, bad=False):
    d = x.flatten().tolist()
    return {"id": "log-%d" % i, "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16],
                                           "data": d[:15] if bad else d}]}


def burst(s, n, threads, first=0):
    """n requests (ids first.., every 7th one malformed: 400) from `threads` keep-alive connections"""
    sts = {}

    def run(k):
        c = s.conn()
        for i in range(first + k, first + n, threads):
            st, _, _ = s.req("POST", "/v2/models/mlp/infer", body(i, bad=i % 7 == 3), conn=c)
            sts[i] = st
        c.close()
    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return sts


def records(text):
    out = []
    for line in text.splitlines():
        if line.startswith("{") and '"msg":"request"' in line:
            out.append(json.loads(line, object_pairs_hook=lambda kv: kv))
    return out


s = Server(repo, "--http-threads", "2")
try:
    n = 400
    sts = burst(s, n, 8)
    check("serve_log_burst_answered", len(sts) == n and all(st == (400 if i % 7 == 3 else 200) for i, st in sts.items()),
          sorted(set(sts.values())))
    time.sleep(0.3)  # idle: the buffered lines are written within a few ms
    recs = records(s.logtext())
    ids = [dict(r)["request_id"] for r in recs if str(dict(r).get("request_id", "")).startswith("log-")]
    check("serve_log_lines_written_while_idle", len(ids) == n, (len(ids), n))
    check("serve_log_one_line_per_request", sorted(ids) == sorted("log-%d" % i for i in range(n)),
          [i for i in set(ids) if ids.count(i) > 1][:5])
    keys_ok = all([k for k, _ in r] == FIELDS for r in recs)
    bad = [dict(r) for r in recs if dict(r)["request_id"] in ("log-3", "log-10")]
    good = next((dict(r) for r in recs if dict(r)["request_id"] == "log-0"), {})
    check("serve_log_fields_and_order", keys_ok and len(bad) == 2 and all(b["status"] == 400 and b["result"] == "bad_request"
                                                                         for b in bad)
          and good.get("status") == 200 and good.get("input_shapes") == "[1,16]" and good.get("level") == "info"
          and re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$", good.get("ts", "")) is not None,
          (recs[0] if recs else None, bad))
    # a burst right before SIGTERM: every line is written before the exit
    sts2 = burst(s, 200, 4, first=n)
    rc = s.stop()
    ids2 = [dict(r)["request_id"] for r in records(logtext(s))]
    check("serve_log_none_lost_at_sigterm", rc == 0 and len(sts2) == 200 and sorted(ids2) == sorted(
        "log-%d" % i for i in range(n + 200)), (rc, len(ids2)))
finally:
    s.stop()

# text format: the same line as other text log lines (key=value)
s = Server(repo, env={"KEEL_LOG_FORMAT": "text"})
try:
    st, _, _ = s.req("POST", "/v2/models/mlp/infer", body(7))
    time.sleep(0.2)
    lines = [ln for ln in logtext(s).splitlines() if "] request " in ln]
    check("serve_log_text_format", st == 200 and len(lines) == 1 and re.match(
        r"^\S+Z INFO  \[serve\] request request_id=log-7 model=mlp version=1 priority=1 input_shapes=\[1,16\] "
        r"batch_size=1 queue_ms=\S+ compute_ms=\S+ total_ms=\S+ status=200 result=success$", lines[0]) is not None,
        lines[:2])
finally:
    s.stop()
done()
