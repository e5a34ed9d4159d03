"""keel serve with real models (an MLP 784-512-512-10 generated with
onnx.helper at test time, checked against numpy): KServe v2 JSON inference
(flat and nested data, id echo, output selection), the binary tensor
extension round trip, 400s naming the field, version routing, dynamic
batching, strict priorities under a low-priority flood, queue-full and
queue-timeout answers (never executed; a level that refuses a request its own
timeout keeps its default), shedding of a low level while the
server is saturated and a higher level has traffic, rate limits (429), memory quotas
(503 + allocator snapshot), hot reload under continuous load with zero
failed requests (and a tampered version refused while the old one serves),
SIGTERM during load with no request lost, per-request logs and metrics."""
import json
import re
import os
import shutil
import signal
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import Server, check, done, mlp_ref, tmpdir, write_meta, write_mlp  # noqa: E402

import numpy as np  # noqa: E402


def metric_sum(text, name, model):
    """A per-version metric of a model, summed over its versions."""
    rx = re.compile(r'%s\{model="%s",version="[^"]*"\} (\S+)$' % (re.escape(name), re.escape(model)))
    return sum(float(m.group(1)) for m in map(rx.match, text.splitlines()) if m)

repo = tmpdir("serve-infer-")
params = write_mlp(os.path.join(repo, "mlp", "1", "model.onnx"), seed=1)
write_meta(os.path.join(repo, "mlp", "1"))
with open(os.path.join(repo, "mlp", "config.yaml"), "w") as f:
    f.write("max_batch_size: 32\ndynamic_batching:\n  max_queue_delay_us: 2000\n"
            "priority_levels: 2\ndefault_priority: 2\n")
# a slower model for queueing tests: one request at a time, small queues
slow_sizes = (1024, 2048, 2048, 10)
write_mlp(os.path.join(repo, "slow", "1", "model.onnx"), seed=2, sizes=slow_sizes)
with open(os.path.join(repo, "slow", "config.yaml"), "w") as f:
    f.write("priority_levels: 2\ndefault_priority: 2\ninstances: 1\n"
            "queue_policy:\n  1: {max_queue_size: 100}\n  2: {max_queue_size: 4, shed_busy_us: 0, allow_timeout_override: false}\n")  # queue-full 503s only
write_mlp(os.path.join(repo, "limited", "1", "model.onnx"), seed=3, sizes=(8, 4, 2))
with open(os.path.join(repo, "limited", "config.yaml"), "w") as f:
    f.write("default_queue_policy: {rate_limit: 2}\nmemory_quota: 64\n")
# a model whose low level is shed as soon as its HTTP loop has been busy 1 µs
# while the high level has traffic: load shedding, deterministically
write_mlp(os.path.join(repo, "shed", "1", "model.onnx"), seed=4, sizes=(8, 4, 2))
with open(os.path.join(repo, "shed", "config.yaml"), "w") as f:
    f.write("priority_levels: 2\ndefault_priority: 2\nqueue_policy:\n  2: {shed_busy_us: 1}\n")
snapdir = tmpdir("serve-snap-")


def infer_body(x, name="x", **extra):
    b = {"inputs": [{"name": name, "datatype": "FP32", "shape": list(x.shape), "data": x.flatten().tolist()}]}
    b.update(extra)
    return b


def bin_req(x, headers=None, **extra):
    """(body, headers) of a binary-extension request: parsing costs nothing next to compute."""
    h = {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape), "parameters": {"binary_data_size": x.nbytes}}]}
    h.update(extra)
    hb = json.dumps(h).encode()
    hd = {"Inference-Header-Content-Length": str(len(hb))}
    hd.update(headers or {})
    return hb + x.tobytes(), hd


def ref(x):
    return mlp_ref(params, x)


rng = np.random.default_rng(7)
s = Server(repo, "--workers", "2", "--probe-interval", "1", "--snapshot-dir", snapdir, "--exit-timeout", "20")
try:
    st, h, b = s.json("GET", "/v2/health/ready")
    check("serve_infer_ready_deep", st == 200 and b.get("ready") is True, (st, b, s.logtext()[-600:]))
    st, h, b = s.json("GET", "/v2/models/mlp")
    check("serve_infer_model_metadata", st == 200 and b["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 784]}]
          and b["outputs"][0]["name"] == "y" and b["versions"] == ["1"], b)
    st, h, b = s.json("GET", "/v2/models/mlp/versions/1/ready")
    check("serve_infer_model_ready", st == 200 and b.get("ready") is True, (st, b))
    # JSON, flat data
    x = rng.standard_normal((3, 784)).astype(np.float32)
    st, h, b = s.json("POST", "/v2/models/mlp/infer", infer_body(x, id="req-42"))
    ok = st == 200 and b.get("id") == "req-42" and b.get("model_version") == "1"
    y = np.array(b["outputs"][0]["data"], dtype=np.float32).reshape(b["outputs"][0]["shape"]) if ok else None
    check("serve_infer_json_flat", ok and y.shape == (3, 10) and np.allclose(y, ref(x), rtol=1e-4, atol=1e-4),
          (st, b if not ok else np.abs(y - ref(x)).max()))
    # nested data, explicit version, output selection
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 784], "data": x[:2].tolist()}],
            "outputs": [{"name": "y"}]}
    st, h, b = s.json("POST", "/v2/models/mlp/versions/1/infer", body)
    ok = st == 200 and len(b.get("outputs", [])) == 1 and "id" not in b
    check("serve_infer_json_nested_version", ok and np.allclose(np.array(b["outputs"][0]["data"]).reshape(2, 10),
                                                                  ref(x[:2]), rtol=1e-4, atol=1e-4), (st, b))
    # binary tensor extension both ways
    hdr = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [3, 784],
                                  "parameters": {"binary_data_size": x.nbytes}}],
                      "outputs": [{"name": "y", "parameters": {"binary_data_output": True}}]}).encode()
    st, h, raw = s.req("POST", "/v2/models/mlp/infer", hdr + x.tobytes(),
                       {"Inference-Header-Content-Length": str(len(hdr)), "Content-Type": "application/octet-stream"})
    ok = st == 200 and "inference-header-content-length" in h
    if ok:
        n = int(h["inference-header-content-length"])
        meta = json.loads(raw[:n])
        yb = np.frombuffer(raw[n:], dtype=np.float32).reshape(meta["outputs"][0]["shape"])
        ok = meta["outputs"][0]["parameters"]["binary_data_size"] == 3 * 10 * 4 and np.allclose(yb, ref(x), rtol=1e-4, atol=1e-4)
    check("serve_infer_binary_round_trip", ok, (st, h, raw[:200]))
    # errors name the field
    cases = [
        ("shape", infer_body(rng.standard_normal((1, 783)).astype(np.float32)), "inputs[0].shape[1]"),
        ("dtype", {"inputs": [{"name": "x", "datatype": "INT64", "shape": [1, 784], "data": [0] * 784}]}, "inputs[0].datatype"),
        ("missing", {"inputs": []}, "missing input 'x'"),
        ("unknown", infer_body(x[:1], name="z"), "inputs[0].name"),
        ("count", {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 784], "data": [0.5] * 784}]}, "inputs[0].data"),
        ("malformed", '{"inputs": [', "malformed JSON"),
        ("number", '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 784], "data": [%s, 1.e5]}]}'
         % ", ".join(["0.5"] * 783), "(inputs[0].data[783]): expected digits after '.' in '1.e5'"),
        ("outputs", infer_body(x[:1], outputs=[{"name": "nope"}]), "outputs[0].name"),
    ]
    for name, body, needle in cases:
        st, h, b = s.json("POST", "/v2/models/mlp/infer", body)
        check("serve_infer_400_" + name, st == 400 and needle in (b or {}).get("error", ""), (st, b))
    st, h, b = s.json("POST", "/v2/models/mlp/infer", infer_body(x[:1]), {"X-Priority": "urgent"})
    check("serve_infer_400_priority_header", st == 400 and "X-Priority" in b.get("error", ""), (st, b))
    st, h, b = s.json("POST", "/v2/models/mlp/versions/9/infer", infer_body(x[:1]))
    check("serve_infer_unknown_version_404", st == 404 and "version 9" in b.get("error", ""), (st, b))

    # dynamic batching: concurrent single-row requests share runs
    results = []

    def one(i):
        xi = x[i % 3:i % 3 + 1]
        st, h, b = s.json("POST", "/v2/models/mlp/infer", infer_body(xi))
        good = st == 200 and np.allclose(np.array(b["outputs"][0]["data"]).reshape(1, 10), ref(xi), rtol=1e-4, atol=1e-4)
        results.append(good)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(24)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    st, h, m = s.req("GET", "/metrics")
    text = m.decode()
    bsum = [metric_sum(text, "keel_inference_batch_size_sum", "mlp")]
    bcnt = [metric_sum(text, "keel_inference_batch_size_count", "mlp")]
    check("serve_infer_dynamic_batching", all(results) and len(results) == 24 and bsum and bcnt and bsum[0] > bcnt[0] * 1.0 + 3,
          (results.count(True), bsum, bcnt))

    # queue-full: level 2 of 'slow' holds 4 requests; a burst of 16 (released
    # together, each a long run) overflows it
    xs = rng.standard_normal((8, slow_sizes[0])).astype(np.float32)
    xp = rng.standard_normal((128, slow_sizes[0])).astype(np.float32)  # ~1.6 GMAC: compute dominates
    low_status, low_503 = [], []
    go = threading.Barrier(16)

    def low_once():
        body = bin_req(xp, parameters={"priority": 2, "timeout": 0})
        c = s.conn()
        go.wait()
        st, h, b = s.req("POST", "/v2/models/slow/infer", *body, conn=c)
        low_status.append(st)
        if st == 503:
            low_503.append((h.get("retry-after"), b[:200]))
    lows = [threading.Thread(target=low_once) for _ in range(16)]
    [t.start() for t in lows]
    [t.join() for t in lows]
    n503 = low_status.count(503)
    check("serve_infer_queue_full_503", n503 >= 1 and low_status.count(200) >= 4 and all(
        ra and b"queue full" in b for ra, b in low_503), (low_status, low_503[:2]))

    # strict priority: a sustained flood of low-priority requests does not delay
    # high-priority ones beyond their own compute. Judged on the server's own
    # per-request log (queue_ms, compute_ms) so that a loaded machine's
    # scheduling noise on the client side does not decide: a high request may
    # wait for the one batch running when it arrives (strict priority, no
    # preemption), never for the queued low ones; FIFO would make it wait for
    # the running one and the 4 queued (~4.5 compute times).

    def log_records():
        out = []
        for line in s.logtext().splitlines():
            if '"msg":"request"' in line and '"model":"slow"' in line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def logged(rid):
        return next((r for r in log_records() if r.get("request_id") == rid), None)
    for i in range(2):  # unloaded: the compute time of one request on this machine now
        s.req("POST", "/v2/models/slow/infer", *bin_req(xp, {"X-Priority": "1"}, id="prio-unloaded-%d" % i))
    flood_stop = threading.Event()
    low_lat, high_lat = [], []
    med = lambda v: sorted(v)[len(v) // 2] if v else 1e9
    n_before = len(log_records())

    def low_flood():
        c = s.conn()
        while not flood_stop.is_set():
            t = time.time()
            st, h, b = s.req("POST", "/v2/models/slow/infer", *bin_req(xp, parameters={"priority": 2, "timeout": 0}), conn=c)
            if st == 200:
                low_lat.append(time.time() - t)
            else:
                time.sleep(0.002)  # queue full: try again
    lows = [threading.Thread(target=low_flood) for _ in range(8)]
    [t.start() for t in lows]
    for _ in range(300):  # until the low level's queue is full (4 waiting behind the running one)
        if 'keel_queue_length{model="slow",priority="2"} 4' in s.req("GET", "/metrics")[2].decode():
            break
        time.sleep(0.01)
    for i in range(4):
        t = time.time()
        st, h, b = s.req("POST", "/v2/models/slow/infer", *bin_req(xp, {"X-Priority": "high"}, id="prio-high-%d" % i))
        if st == 200:
            high_lat.append(time.time() - t)
        time.sleep(0.01)
    flood_stop.set()
    [t.join() for t in lows]
    time.sleep(0.2)  # the last log lines
    un = [logged("prio-unloaded-%d" % i) for i in range(2)]
    hi = [logged("prio-high-%d" % i) for i in range(4)]
    runs = [r["compute_ms"] for r in log_records()[n_before:] if r.get("status") == 200]
    ok = all(un) and all(hi) and len(high_lat) == 4 and len(low_lat) >= 4 and runs
    if ok:
        # the compute time of one such request on this machine during this very flood (median of all runs)
        compute_ms = med(runs)
        hq = [r["queue_ms"] for r in hi]
        # waiting for about the one running batch (2x + 10 ms of slack for a loaded machine; FIFO waits
        # ~4.5x), and less than the lows' median wait
        ok = med(hq) <= 2 * compute_ms + 10 and med(high_lat) < med(low_lat)
    check("serve_infer_priority_high_not_delayed", ok,
          ("median compute ms %.1f" % (med(runs) if runs else -1), "high queue ms", [r and r["queue_ms"] for r in hi],
           "high s", ["%.3f" % v for v in high_lat], "low s", ["%.3f" % v for v in sorted(low_lat)]))

    # queue timeout: requests behind a long run time out, get 503 and are never executed
    def count(text, model, result):   # summed over the model's versions
        n = [int(l.split()[-1]) for l in text.splitlines()
             if re.match(r'keel_inference_requests_total\{model="%s",version="[^"]*",result="%s"\}' % (model, result), l)]
        return sum(n) if n else -1
    big = rng.standard_normal((1024, slow_sizes[0])).astype(np.float32)  # 6.4 GMAC: a long run
    text0 = s.req("GET", "/metrics")[2].decode()
    blocker = threading.Thread(target=lambda: s.req("POST", "/v2/models/slow/infer", *bin_req(big, {"X-Priority": "1"})))
    blocker.start()
    for _ in range(200):  # until the blocker runs
        if 'keel_inference_running{model="slow"} 1' in s.req("GET", "/metrics")[2].decode():
            break
        time.sleep(0.01)
    tout = []

    def timed():
        st, h, b = s.json("POST", "/v2/models/slow/infer", *bin_req(xs, {"X-Priority": "1"}, parameters={"timeout": 1000}))
        tout.append((st, (b or {}).get("error", "") if isinstance(b, dict) else "", h.get("retry-after")))
    tt = [threading.Thread(target=timed) for _ in range(3)]
    [t.start() for t in tt]
    # priority 2 does not let a request set its timeout (allow_timeout_override: false, no default):
    # the same 1 ms asked for is ignored and the request waits for the blocker, then runs
    strict = []
    ts = threading.Thread(target=lambda: strict.append(s.req("POST", "/v2/models/slow/infer", *bin_req(
        xs, {"X-Priority": "2"}, parameters={"timeout": 1000}))[0]))
    ts.start()
    [t.join() for t in tt]
    ts.join()
    blocker.join()
    text1 = s.req("GET", "/metrics")[2].decode()
    executed = lambda t: int(metric_sum(t, "keel_inference_compute_duration_seconds_count", "slow"))
    check("serve_infer_queue_timeout_503", all(st == 503 and "timed out" in e and ra for st, e, ra in tout)
          and count(text1, "slow", "timeout") - count(text0, "slow", "timeout") == 3, tout)
    check("serve_infer_timeout_never_executed", executed(text1) - executed(text0) == 2, (executed(text0), executed(text1)))
    check("serve_infer_timeout_override_refused_by_level", strict == [200], strict)

    # rate limit (2 requests/s, burst 2) -> 429; memory quota (64 bytes) -> 503 + snapshot
    xl = rng.standard_normal((1, 8)).astype(np.float32)
    sts = [s.json("POST", "/v2/models/limited/infer", infer_body(xl))[0] for _ in range(6)]
    check("serve_infer_rate_limit_429", 429 in sts, sts)
    time.sleep(1.1)
    st, h, b = s.json("POST", "/v2/models/limited/infer", infer_body(xl))
    snaps = os.listdir(snapdir)
    check("serve_infer_memory_quota_503_snapshot", st == 503 and "memory quota" in b.get("error", "") and h.get("retry-after")
          and len(snaps) >= 1 and "allocator snapshot" in b.get("error", ""), (st, b, snaps))

    # shedding on saturation: low priority runs while no higher level has
    # traffic; once the high level has, a low request is answered 503
    # (reason overloaded, Retry-After) before its decode whether its level
    # came in X-Priority or with the body (default priority)
    xs8 = rng.standard_normal((1, 8)).astype(np.float32)
    st0, _, _ = s.json("POST", "/v2/models/shed/infer", infer_body(xs8), {"X-Priority": "2"})
    st1, _, _ = s.json("POST", "/v2/models/shed/infer", infer_body(xs8), {"X-Priority": "1"})
    st2, h2, b2 = s.json("POST", "/v2/models/shed/infer", infer_body(xs8), {"X-Priority": "2"})
    st3, h3, b3 = s.json("POST", "/v2/models/shed/infer", infer_body(xs8))
    st, h, m = s.req("GET", "/metrics")
    shed_n = [sum(float(l.split()[-1]) for l in m.decode().splitlines()
                  if re.match(r'keel_inference_requests_total\{model="shed",version="[^"]*",result="overloaded"\}', l))]
    check("serve_infer_shed_low_when_saturated", st0 == 200 and st1 == 200 and st2 == 503 and st3 == 503
          and "shed" in (b2 or {}).get("error", "") and h2.get("retry-after") and h3.get("retry-after")
          and shed_n == [2.0], (st0, st1, st2, b2, st3, b3, shed_n))

    # hot reload under continuous load: zero failed requests, version 2 takes over
    params2 = None
    stop = threading.Event()
    outcomes, versions = [], []

    def load_loop():
        c = s.conn()
        while not stop.is_set():
            try:
                st, h, b = s.json("POST", "/v2/models/mlp/infer", infer_body(x[:1]), conn=c)
                outcomes.append(st)
                if st == 200:
                    versions.append(b["model_version"])
            except Exception as ex:  # a dropped connection is a failure
                outcomes.append(repr(ex))
                c = s.conn()
        c.close()
    loaders = [threading.Thread(target=load_loop) for _ in range(4)]
    [t.start() for t in loaders]
    time.sleep(0.3)
    params2 = write_mlp(os.path.join(repo, "mlp", "2", "model.onnx"), seed=11)
    write_meta(os.path.join(repo, "mlp", "2"))
    s.signal(signal.SIGHUP)
    for _ in range(100):
        if versions and versions[-1] == "2":
            break
        time.sleep(0.05)
    time.sleep(0.3)
    # a tampered version 3 is refused; version 2 keeps serving
    write_mlp(os.path.join(repo, "mlp", "3", "model.onnx"), seed=12)
    write_meta(os.path.join(repo, "mlp", "3"), override={"model.onnx": "f" * 64})
    st_load, _, bl = s.json("POST", "/v2/repository/models/mlp/load")
    time.sleep(0.3)
    stop.set()
    [t.join() for t in loaders]
    bad = [o for o in outcomes if o != 200]
    check("serve_infer_hot_reload_zero_failures", len(outcomes) > 20 and not bad, (len(outcomes), bad[:5]))
    check("serve_infer_hot_reload_swapped", "1" in versions and versions[-1] == "2", (versions[:3], versions[-3:]))
    check("serve_infer_hot_reload_old_drained_freed", "model mlp version 1 drained and freed" in s.logtext(),
          s.logtext()[-400:])
    st, h, b = s.json("POST", "/v2/models/mlp/infer", infer_body(x[:1]))
    check("serve_infer_tampered_refused_old_serves", st_load == 400 and "sha256" in (bl or {}).get("error", "") and st == 200
          and b["model_version"] == "2" and np.allclose(np.array(b["outputs"][0]["data"]), mlp_ref(params2, x[:1]).ravel(),
                                                       rtol=1e-4, atol=1e-4), (st_load, bl, st))
    log = s.logtext()
    reqlines = [json.loads(l) for l in log.splitlines() if l.startswith("{") and '"msg":"request"' in l]
    ok = reqlines and all(k in reqlines[-1] for k in ("request_id", "model", "version", "priority", "input_shapes",
                                                      "batch_size", "queue_ms", "compute_ms", "status"))
    check("serve_infer_request_log_lines", ok and any(r.get("request_id") == "req-42" for r in reqlines),
          reqlines[-1] if reqlines else log[-400:])
    st, h, body = s.req("GET", "/metrics")
    import subprocess
    p = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True)
    check("serve_infer_promtool_after_traffic", p.returncode == 0 and re.search(rb'keel_inference_request_duration_seconds_count\{model="mlp",version="\d+",priority="2"\}', body),
          (p.stdout + p.stderr)[:300])
finally:
    rc = s.stop()
check("serve_infer_exit_0", rc == 0, rc)

# SIGTERM during load: everything admitted is answered, new work gets 503, exit 0
s = Server(repo, "--workers", "2", "--exit-timeout", "20")
outcomes = []
term_at = [None]


def client():
    c = s.conn()
    xs = np.ones((16, slow_sizes[0]), dtype=np.float32)
    while True:
        t = time.time()
        try:
            st, h, b = s.json("POST", "/v2/models/slow/infer", infer_body(xs), {"X-Priority": "1"}, conn=c)
            outcomes.append((t, st))
        except Exception as ex:
            outcomes.append((t, repr(ex)))
            break
        if st != 200:
            break
    c.close()


cs = [threading.Thread(target=client) for _ in range(6)]
[t.start() for t in cs]
time.sleep(0.5)
term_at[0] = time.time()
s.signal(signal.SIGTERM)
[t.join(60) for t in cs]
rc = s.p.wait(60)
ended = time.time()
lost = [(t - term_at[0], o) for t, o in outcomes if o not in (200, 503) and t < term_at[0]]
after = [o for t, o in outcomes if t >= term_at[0]]
check("serve_sigterm_no_request_lost", not lost and outcomes.count((0, 0)) == 0 and len(outcomes) > 6, (lost[:4], len(outcomes)))
check("serve_sigterm_drains_then_503", any(o == 200 for t, o in outcomes) and all(o in (200, 503) or isinstance(o, str) for o in after), after[:8])
check("serve_sigterm_exit_0", rc == 0 and ended - term_at[0] < 20, (rc, ended - term_at[0]))
s.log.close()

# SIGTERM with --exit-timeout shorter than the work: the running batch finishes,
# what is still queued is answered 503, exit 0
s = Server(repo, "--workers", "1", "--exit-timeout", "0.2")
res = {}
big = rng.standard_normal((12288, slow_sizes[0])).astype(np.float32)  # 78 GMAC on one thread: over 0.3 s on a fast core
blk = threading.Thread(target=lambda: res.__setitem__("blocker", s.req("POST", "/v2/models/slow/infer",
                                                                        *bin_req(big, {"X-Priority": "1"}))[0]))
blk.start()
for _ in range(300):
    if 'keel_inference_running{model="slow"} 1' in s.req("GET", "/metrics")[2].decode():
        break
    time.sleep(0.01)
queued = []
qs = [threading.Thread(target=lambda: queued.append(s.json("POST", "/v2/models/slow/infer",
                                                           *bin_req(xs, {"X-Priority": "1"})))) for _ in range(3)]
[t.start() for t in qs]
queued_at_term = None
for _ in range(300):  # SIGTERM once the three wait behind the running batch
    m = s.req("GET", "/metrics")[2].decode()
    qlen = sum(int(v) for v in re.findall(r'keel_queue_length\{model="slow"[^}]*\} (\d+)', m))
    if qlen == 3 or 'keel_inference_running{model="slow"} 1' not in m:
        queued_at_term = (qlen, 'keel_inference_running{model="slow"} 1' in m)
        break
    time.sleep(0.01)
s.signal(signal.SIGTERM)
[t.join(30) for t in qs]
blk.join(30)
rc = s.p.wait(30)
s.log.close()
check("serve_exit_timeout_running_finishes_queued_503", queued_at_term == (3, True) and res.get("blocker") == 200
      and len(queued) == 3 and all(st == 503 and "shutting down" in b.get("error", "") for st, h, b in queued) and rc == 0,
      ("queued, running at SIGTERM", queued_at_term, res, [(st, str(b)[:80]) for st, h, b in queued], rc))

# registry references: serve mlp@champion from the model registry; moving the
# alias and SIGHUP swap the served version
import subprocess  # noqa: E402
store = tmpdir("serve-store-")
keel = os.environ.get("KEEL", "build/keel")
def models(*args):
    return subprocess.run([keel, "--tracking", store, "models"] + list(args), capture_output=True, text=True)
r1 = models("register", os.path.join(repo, "mlp", "1"), "--name", "mlp", "--alias", "champion")
r2 = models("register", os.path.join(repo, "mlp", "2"), "--name", "mlp")
check("serve_registry_setup", r1.returncode == 0 and r2.returncode == 0, (r1.stderr, r2.stderr))
s = Server("mlp@champion", env={"KEEL_TRACKING": store})
try:
    st, h, b = s.json("POST", "/v2/models/mlp/infer", infer_body(x[:1]))
    check("serve_registry_alias_served", st == 200 and b["model_version"] == "1" and np.allclose(
        np.array(b["outputs"][0]["data"]), ref(x[:1]).ravel(), rtol=1e-4, atol=1e-4), (st, b))
    ra = models("alias", "mlp", "champion", "2")
    s.signal(signal.SIGHUP)
    v = None
    for _ in range(100):
        st, h, b = s.json("POST", "/v2/models/mlp/infer", infer_body(x[:1]))
        v = b.get("model_version") if st == 200 else st
        if v == "2":
            break
        time.sleep(0.05)
    check("serve_registry_alias_moved_sighup", ra.returncode == 0 and v == "2" and np.allclose(
        np.array(b["outputs"][0]["data"]), mlp_ref(params2, x[:1]).ravel(), rtol=1e-4, atol=1e-4), (ra.stderr, v))
    # a reference that cannot be resolved at SIGHUP (the store is gone) is logged; the current version keeps serving
    os.rename(store, store + ".away")
    s.signal(signal.SIGHUP)
    for _ in range(100):
        if "mlp@champion:" in s.logtext() and "the current version keeps serving" in s.logtext():
            break
        time.sleep(0.05)
    st, h, b = s.json("POST", "/v2/models/mlp/infer", infer_body(x[:1]))
    shutil.rmtree(store, ignore_errors=True)
    os.rename(store + ".away", store)
    check("serve_registry_unresolvable_keeps_serving", "the current version keeps serving" in s.logtext()
          and st == 200 and b["model_version"] == "2", (st, b, s.logtext()[-500:]))
finally:
    rc = s.stop()
check("serve_registry_exit_0", rc == 0, rc)
# a fixed registry version (name/N): served as is
s = Server("mlp/1", env={"KEEL_TRACKING": store})
try:
    st, h, b = s.json("POST", "/v2/models/mlp/infer", infer_body(x[:1]))
    check("serve_registry_fixed_version_served", st == 200 and b["model_version"] == "1" and np.allclose(
        np.array(b["outputs"][0]["data"]), ref(x[:1]).ravel(), rtol=1e-4, atol=1e-4), (st, b))
finally:
    rc = s.stop()
done()
