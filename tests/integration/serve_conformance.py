"""keel serve: the requirements of the serving issue that the other serve
tests left unchecked (found by an audit of issue 6), on the real binary:
every KServe datatype BOOL..FP64 through a real model (an Identity per
datatype) in JSON (nested and flat data) and in the binary extension with
the request-level binary_data_output (and a per-output override), BYTES
refused by a model that does not take them, a version whose warm-up
inference fails is refused, version policies (latest N, specific, changed
by a reload; a refused version keeps the current ones serving; the meta.json
layouts), version routes (metadata, ready, infer; 404 for a version not
loaded), unload and load of a serving model, per-priority memory shares
(503 + Retry-After + the allocator snapshot written), X-Priority low/high
against the `priority` parameter, 429 with Retry-After, the background
health probe running, request log lines in JSON when stderr is not a
terminal, unload while requests run and wait (they finish, the version is
freed), a request whose data the model refuses (a Gather index out of
range) answered 400 without failing the requests batched with it, and on
SIGTERM readiness false at once and new inference 503 while
a running request still finishes. The server runs with
--threads-per-worker 2 (every answer is checked)."""
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import Server, check, done, mlp_ref, sha256, tmpdir, write_meta, write_mlp  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto as TP, helper, numpy_helper  # noqa: E402

repo = tmpdir("serve-conf-")
snapdir = tmpdir("serve-conf-snap-")

# KServe name, ONNX type, numpy type of the raw bytes (BF16: its bits)
DTYPES = [("BOOL", TP.BOOL, np.bool_), ("UINT8", TP.UINT8, np.uint8), ("UINT16", TP.UINT16, np.uint16),
          ("UINT32", TP.UINT32, np.uint32), ("UINT64", TP.UINT64, np.uint64), ("INT8", TP.INT8, np.int8),
          ("INT16", TP.INT16, np.int16), ("INT32", TP.INT32, np.int32), ("INT64", TP.INT64, np.int64),
          ("FP16", TP.FLOAT16, np.float16), ("BF16", TP.BFLOAT16, np.uint16), ("FP32", TP.FLOAT, np.float32),
          ("FP64", TP.DOUBLE, np.float64)]


def save(graph, path):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(m, path)


# ids: out_T = Identity(in_T) for every datatype, shape [N, 2]
save(helper.make_graph([helper.make_node("Identity", ["in_" + n], ["out_" + n]) for n, _, _ in DTYPES], "ids",
                       [helper.make_tensor_value_info("in_" + n, t, ["N", 2]) for n, t, _ in DTYPES],
                       [helper.make_tensor_value_info("out_" + n, t, ["N", 2]) for n, t, _ in DTYPES]),
     os.path.join(repo, "ids", "1", "model.onnx"))
# warmfail: loads, but its warm-up on a 1-row input cannot run (Reshape [1,4] -> [2,4])
save(helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "warmfail",
                       [helper.make_tensor_value_info("x", TP.FLOAT, ["N", 4])],
                       [helper.make_tensor_value_info("y", TP.FLOAT, [2, 4])],
                       [helper.make_tensor("s", TP.INT64, [2], [2, 4])]),
     os.path.join(repo, "warmfail", "1", "model.onnx"))
# heavy: 24 MatMuls by one 1024x1024 weight (a 2048-row run takes a good fraction of a second)
w = (np.random.default_rng(0).standard_normal((1024, 1024)) / 32).astype(np.float32)
save(helper.make_graph([helper.make_node("MatMul", ["x" if i == 0 else "h%d" % (i - 1), "w"], ["y" if i == 23 else "h%d" % i])
                        for i in range(24)], "heavy",
                       [helper.make_tensor_value_info("x", TP.FLOAT, ["N", 1024])],
                       [helper.make_tensor_value_info("y", TP.FLOAT, ["N", 1024])], [numpy_helper.from_array(w, "w")]),
     os.path.join(repo, "heavy", "1", "model.onnx"))
# multi: versions 1..3, {latest: 2}; meta.json in the list and the "sha256" layouts
mp = {v: write_mlp(os.path.join(repo, "multi", str(v), "model.onnx"), seed=20 + v, sizes=(8, 4, 2)) for v in (1, 2, 3)}
with open(os.path.join(repo, "multi", "3", "meta.json"), "w") as f:
    json.dump({"files": [{"path": "model.onnx", "sha256": sha256(os.path.join(repo, "multi", "3", "model.onnx"))}]}, f)
with open(os.path.join(repo, "multi", "2", "meta.json"), "w") as f:
    json.dump({"sha256": {"model.onnx": sha256(os.path.join(repo, "multi", "2", "model.onnx"))}}, f)
with open(os.path.join(repo, "multi", "config.yaml"), "w") as f:
    f.write("version_policy: {latest: 2}\n")
# every: versions 1 and 2, version_policy all; version 2's meta.json in the map-of-objects layout
for v in (1, 2):
    write_mlp(os.path.join(repo, "every", str(v), "model.onnx"), seed=50 + v, sizes=(8, 4, 2))
with open(os.path.join(repo, "every", "config.yaml"), "w") as f:
    f.write("version_policy: all\n")
with open(os.path.join(repo, "every", "2", "meta.json"), "w") as f:  # the {"files": {name: {"sha256": ...}}} layout
    json.dump({"files": {"model.onnx": {"sha256": sha256(os.path.join(repo, "every", "2", "model.onnx"))}}}, f)
# pinned: versions 1, 2 and a tampered 3 (list layout); {specific: [1]}
pp = {v: write_mlp(os.path.join(repo, "pinned", str(v), "model.onnx"), seed=30 + v, sizes=(8, 4, 2)) for v in (1, 2, 3)}
write_meta(os.path.join(repo, "pinned", "2"))
with open(os.path.join(repo, "pinned", "3", "meta.json"), "w") as f:
    json.dump({"files": [{"path": "model.onnx", "sha256": "0" * 64}]}, f)


def pinned_policy(versions):
    with open(os.path.join(repo, "pinned", "config.yaml"), "w") as f:
        f.write("version_policy: {specific: %s}\n" % json.dumps(versions))


pinned_policy([1])
# shares: of the 1 MiB serving budget (--memory-budget) priority 1 may plan half, priority 2 a byte; rated: 1 request/s
sp = write_mlp(os.path.join(repo, "shares", "1", "model.onnx"), seed=40, sizes=(8, 4, 2))
with open(os.path.join(repo, "shares", "config.yaml"), "w") as f:
    f.write("priority_levels: 2\ndefault_priority: 1\nqueue_policy:\n  1: {memory_share: 0.5}\n  2: {memory_share: 0.000001}\n")
# pref: preferred batch size 4 under a long delay, on the workers (priority 2 never runs inline)
write_mlp(os.path.join(repo, "pref", "1", "model.onnx"), seed=42, sizes=(8, 4, 2))
with open(os.path.join(repo, "pref", "config.yaml"), "w") as f:
    f.write("max_batch_size: 32\ndynamic_batching: {max_queue_delay_us: 1500000, preferred_batch_sizes: [4]}\n"
            "priority_levels: 2\ndefault_priority: 2\n")
# lookup: y = table[idx] (Gather), batched under a long delay with preferred size 3 on the workers
table = np.arange(30, dtype=np.float32).reshape(10, 3)
save(helper.make_graph([helper.make_node("Gather", ["table", "idx"], ["y"], axis=0)], "lookup",
                       [helper.make_tensor_value_info("idx", TP.INT64, ["N"])],
                       [helper.make_tensor_value_info("y", TP.FLOAT, ["N", 3])], [numpy_helper.from_array(table, "table")]),
     os.path.join(repo, "lookup", "1", "model.onnx"))
with open(os.path.join(repo, "lookup", "config.yaml"), "w") as f:
    f.write("max_batch_size: 8\ndynamic_batching: {max_queue_delay_us: 1500000, preferred_batch_sizes: [3]}\n"
            "priority_levels: 2\ndefault_priority: 2\n")
write_mlp(os.path.join(repo, "rated", "1", "model.onnx"), seed=41, sizes=(8, 4, 2))
with open(os.path.join(repo, "rated", "config.yaml"), "w") as f:
    f.write("default_queue_policy: {rate_limit: 1}\n")

rng = np.random.default_rng(5)
x8 = rng.standard_normal((2, 8)).astype(np.float32)


def body8(x=x8, **extra):
    b = {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape), "data": x.flatten().tolist()}]}
    b.update(extra)
    return b


def metric(text, prefix):
    for line in text.splitlines():
        if line.startswith(prefix + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def bf16_bits(v):
    """the BF16 bits of v (round to nearest even from its float32), as the server converts"""
    b = int(np.array([v], dtype=np.float32).view(np.uint32)[0])
    return (b + 0x7FFF + ((b >> 16) & 1)) >> 16


# one value set per datatype: extremes included (64-bit integers beyond 2^53: every digit kept)
VALS = {"BOOL": [True, False, False, True], "UINT8": [0, 255, 7, 1], "UINT16": [0, 65535, 3, 4],
        "UINT32": [0, 4294967295, 5, 6], "UINT64": [0, 2 ** 64 - 1, 2 ** 53 + 1, 2], "INT8": [-128, 127, 0, -1],
        "INT16": [-32768, 32767, 0, 1], "INT32": [-2147483648, 2147483647, 0, 1],
        "INT64": [-(2 ** 63), 2 ** 63 - 1, -(2 ** 53) - 1, 3], "FP16": [0.5, -2.0, 65504.0, 0.0001],
        "BF16": [1.0, -3.5, 1e30, 0.0078125], "FP32": [0.1, -3.4028234663852886e38, 1e-45, 2.5],
        "FP64": [0.1, -1.7976931348623157e308, 5e-324, 2.5]}


def same(name, sent, got):
    if name == "FP16":
        return list(np.float16(np.float32(sent))) == list(np.float16(np.array(got, dtype=np.float64)))
    if name == "BF16":
        return [bf16_bits(v) for v in sent] == [bf16_bits(v) for v in got]
    if name == "FP32":
        return list(np.float32(sent)) == list(np.float32(got))
    return list(sent) == list(got)


s = Server(repo, "--workers", "1", "--threads-per-worker", "2", "--probe-interval", "0.3", "--snapshot-dir", snapdir,
           "--exit-timeout", "20", "--memory-budget", "1M",
           env={"KEEL_LOG_FORMAT": None})
try:
    t_start = time.time()
    # -- every datatype through a real model, JSON: flat and nested data alike
    ins = [{"name": "in_" + n, "datatype": n, "shape": [2, 2],
            "data": VALS[n] if i % 2 else [VALS[n][:2], VALS[n][2:]]} for i, (n, _, _) in enumerate(DTYPES)]
    st, h, b = s.json("POST", "/v2/models/ids/infer", {"id": "all-types", "inputs": ins})
    outs = {o["name"]: o for o in (b or {}).get("outputs", [])} if st == 200 else {}
    bad = [n for n, _, _ in DTYPES if not ("out_" + n in outs and outs["out_" + n]["datatype"] == n
                                           and outs["out_" + n]["shape"] == [2, 2]
                                           and same(n, VALS[n], outs["out_" + n]["data"]))]
    check("serve_conf_json_all_datatypes", st == 200 and b.get("id") == "all-types" and not bad,
          (st, bad, [outs.get("out_" + n) for n in bad][:3] if st == 200 else b))
    # -- the binary extension for every datatype; the request's binary_data_output, overridden for one output
    raw = {}
    for n, _, nt in DTYPES:
        if n == "BF16":
            raw[n] = np.array([bf16_bits(v) for v in VALS[n]], dtype=np.uint16)
        elif n == "FP16":
            raw[n] = np.float16(np.float32(VALS[n]))
        else:
            raw[n] = np.array(VALS[n], dtype=nt)
    hdr = json.dumps({"parameters": {"binary_data_output": True},
                      "inputs": [{"name": "in_" + n, "datatype": n, "shape": [2, 2],
                                  "parameters": {"binary_data_size": raw[n].nbytes}} for n, _, _ in DTYPES],
                      "outputs": [{"name": "out_" + n} if n != "FP64" else
                                  {"name": "out_FP64", "parameters": {"binary_data_output": False}}
                                  for n, _, _ in DTYPES]}).encode()
    st, h, data = s.req("POST", "/v2/models/ids/infer", hdr + b"".join(raw[n].tobytes() for n, _, _ in DTYPES),
                        {"Inference-Header-Content-Length": str(len(hdr)), "Content-Type": "application/octet-stream"})
    bad, why = [], ""
    if st == 200 and "inference-header-content-length" in h:
        n0 = int(h["inference-header-content-length"])
        meta, off = json.loads(data[:n0]), n0
        for o in meta["outputs"]:
            name = o["name"][4:]
            if name == "FP64":
                if "data" not in o or o["data"] != VALS["FP64"]:
                    bad.append(name)
                continue
            size = o.get("parameters", {}).get("binary_data_size", -1)
            if data[off:off + size] != raw[name].tobytes() or o["datatype"] != name:
                bad.append(name)
            off += max(size, 0)
        if off != len(data):
            why = "%d bytes after the outputs" % (len(data) - off)
    else:
        bad, why = ["all"], (st, h, data[:300])
    check("serve_conf_binary_all_datatypes_request_binary_output", not bad and not why, (bad, why))
    # -- BYTES (and any other wrong datatype) to a model that does not take them: 400 naming the field
    st, h, b = s.json("POST", "/v2/models/ids/infer", {"inputs": [
        {"name": "in_FP32", "datatype": "BYTES", "shape": [1, 2], "data": ["a", "b"]}]})
    check("serve_conf_bytes_refused_400", st == 400 and "inputs[0].datatype" in b.get("error", "")
          and "BYTES" in b.get("error", ""), (st, b))

    # -- binary extension errors: a header length beyond the body, binary data not matching the shape
    hx = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8],
                                 "parameters": {"binary_data_size": 32}}]}).encode()
    st1, _, b1 = s.json("POST", "/v2/models/shares/infer", hx + bytes(32), {"Inference-Header-Content-Length": "99999"})
    st2, _, b2 = s.json("POST", "/v2/models/shares/infer", hx + bytes(28), {"Inference-Header-Content-Length": str(len(hx))})
    st3, _, b3 = s.json("POST", "/v2/models/shares/infer", hx.replace(b"size\": 32", b"size\": 28") + bytes(28),
                        {"Inference-Header-Content-Length": str(len(hx))})
    check("serve_conf_binary_errors_400", st1 == 400 and "Inference-Header-Content-Length" in b1.get("error", "")
          and st2 == 400 and "inputs[0].parameters.binary_data_size" in b2.get("error", "")
          and st3 == 400 and "inputs[0].parameters.binary_data_size: 28 bytes, shape needs 32" in b3.get("error", ""),
          (st1, b1, st2, b2, st3, b3))

    # -- a version whose warm-up inference fails is refused (logged, counted), never served
    st, h, b = s.json("POST", "/v2/repository/index")
    wf = next((m for m in b if m["name"] == "warmfail"), {}) if st == 200 else {}
    check("serve_conf_warmup_failure_refused", wf.get("state") == "UNAVAILABLE" and "warm-up inference" in wf.get("reason", "")
          and "warmfail version 1 refused: warm-up inference" in s.logtext(), wf)
    st, h, b = s.json("POST", "/v2/repository/models/warmfail/unload")  # (it keeps the server not ready)
    st, h, b = s.json("GET", "/v2/health/ready")
    check("serve_conf_ready_after_unloading_the_refused", st == 200, (st, b))

    # -- version policy {latest: 2}: versions 3 and 2 (both meta.json layouts verified), 1 not loaded
    st, h, b = s.json("GET", "/v2/models/multi")
    check("serve_conf_policy_latest_2", st == 200 and b.get("versions") == ["3", "2"], (st, b))
    st1, h, b1 = s.json("GET", "/v2/models/every")
    log = s.logtext()
    check("serve_conf_policy_all", st1 == 200 and b1.get("versions") == ["2", "1"], (st1, b1))
    check("serve_conf_meta_json_layouts_verified", all("model %s ready (sha256 verified" % mv in log for mv in (
        "every version 2", "multi version 3", "multi version 2")), log[-600:])
    st, h, b = s.json("POST", "/v2/models/multi/infer", body8())
    check("serve_conf_latest_served_by_default", st == 200 and b["model_version"] == "3" and np.allclose(
        np.array(b["outputs"][0]["data"]).reshape(2, 2), mlp_ref(mp[3], x8), rtol=1e-5, atol=1e-6), (st, b))
    st, h, b = s.json("POST", "/v2/models/multi/versions/2/infer", body8())
    check("serve_conf_version_route_infer", st == 200 and b["model_version"] == "2" and np.allclose(
        np.array(b["outputs"][0]["data"]).reshape(2, 2), mlp_ref(mp[2], x8), rtol=1e-5, atol=1e-6), (st, b))
    st, h, b = s.json("GET", "/v2/models/multi/versions/2")
    check("serve_conf_version_route_metadata", st == 200 and b.get("name") == "multi"
          and b["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 8]}], (st, b))
    st2, h, b2 = s.json("GET", "/v2/models/multi/versions/2/ready")
    check("serve_conf_version_route_ready", st2 == 200 and b2.get("ready") is True and b2.get("version") == "2", (st2, b2))
    r404 = [s.json(m, p, body8() if m == "POST" else None)[:3:2] for m, p in (
        ("POST", "/v2/models/multi/versions/1/infer"), ("GET", "/v2/models/multi/versions/1"),
        ("GET", "/v2/models/multi/versions/1/ready"), ("GET", "/v2/models/nope/ready"))]
    check("serve_conf_version_not_loaded_404", all(st == 404 and "error" in b for st, b in r404), r404)

    # -- version policy {specific: [1]}, then [1, 2] by a reload; a tampered 3 is refused and 2, 1 keep serving
    st, h, b = s.json("GET", "/v2/models/pinned")
    st1, h, b1 = s.json("POST", "/v2/models/pinned/infer", body8())
    check("serve_conf_policy_specific", st == 200 and b.get("versions") == ["1"] and st1 == 200
          and b1["model_version"] == "1", (st, b, st1, b1))
    pinned_policy([1, 2])
    stl, h, bl = s.json("POST", "/v2/repository/models/pinned/load")
    st, h, b = s.json("GET", "/v2/models/pinned")
    st1, h, b1 = s.json("POST", "/v2/models/pinned/infer", body8())
    check("serve_conf_policy_changed_by_load", stl == 200 and b.get("versions") == ["2", "1"] and st1 == 200
          and b1["model_version"] == "2", (stl, bl, b, b1))
    pinned_policy([3])
    stl, h, bl = s.json("POST", "/v2/repository/models/pinned/load")
    st, h, b = s.json("GET", "/v2/models/pinned")
    check("serve_conf_refused_version_keeps_current", stl == 400 and "sha256" in bl.get("error", "")
          and b.get("versions") == ["2", "1"], (stl, bl, b))

    # -- unload a serving model: 503 with Retry-After, UNLOADED in the index; load brings it back
    st, h, b = s.json("POST", "/v2/repository/models/pinned/unload")
    sti, hi, bi = s.json("POST", "/v2/models/pinned/infer", body8())
    str_, h, br = s.json("GET", "/v2/models/pinned/ready")
    idx = s.json("POST", "/v2/repository/index")[2]
    check("serve_conf_unload_serving_model", st == 200 and sti == 503 and hi.get("retry-after") and "unloaded" in bi.get("error", "")
          and str_ == 503 and [m["state"] for m in idx if m["name"] == "pinned"] == ["UNLOADED"], (st, sti, bi, str_, br))
    pinned_policy([1])
    stl, h, bl = s.json("POST", "/v2/repository/models/pinned/load")
    st, h, b = s.json("POST", "/v2/models/pinned/infer", body8())
    check("serve_conf_load_after_unload", stl == 200 and st == 200 and b["model_version"] == "1" and np.allclose(
        np.array(b["outputs"][0]["data"]).reshape(2, 2), mlp_ref(pp[1], x8), rtol=1e-5, atol=1e-6), (stl, bl, st, b))

    # -- priorities: X-Priority low = the lowest level, high = 1, the header over the `priority` parameter;
    #    a level's memory_share: priority 2 of 'shares' may plan nothing -> 503 + Retry-After + allocator snapshot
    st, h, b = s.json("POST", "/v2/models/shares/infer", body8(), {"X-Priority": "low"})
    path = b.get("error", "").split("allocator snapshot: ")[-1] if st == 503 else ""
    try:
        with open(path) as f:
            snap_ok = isinstance(json.load(f), (dict, list))
    except (OSError, ValueError):
        snap_ok = False
    check("serve_conf_memory_share_503_snapshot", st == 503 and "priority 2: memory quota exceeded" in b.get("error", "")
          and h.get("retry-after") and snap_ok and os.path.dirname(path) == snapdir, (st, b, path))
    sts = [s.json("POST", "/v2/models/shares/infer", body8(**kw), hd)[0] for hd, kw in (
        ({}, {}), ({}, {"parameters": {"priority": 2}}), ({"X-Priority": "high"}, {"parameters": {"priority": 2}}),
        ({"X-Priority": "2"}, {"parameters": {"priority": 1}}))]
    check("serve_conf_priority_header_and_parameter", sts == [200, 503, 200, 503], sts)
    # priority 1's half of the budget: a request planning more than 512 KiB (its 640 KB input alone) is refused
    xb = np.ones((20000, 8), dtype=np.float32)
    hb = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [20000, 8],
                                 "parameters": {"binary_data_size": xb.nbytes}}]}).encode()
    st, h, b = s.json("POST", "/v2/models/shares/infer", hb + xb.tobytes(), {"Inference-Header-Content-Length": str(len(hb))})
    budget = metric(s.req("GET", "/metrics")[2].decode(), "keel_serving_memory_budget_bytes")
    check("serve_conf_memory_share_of_budget", st == 503 and "priority 1: memory quota exceeded" in b.get("error", "")
          and "50% of 1048576" in b.get("error", "") and budget == 1048576, (st, b, budget))
    # -- a level over its rate limit: 429 with Retry-After
    r = [s.json("POST", "/v2/models/rated/infer", body8()) for _ in range(3)]
    check("serve_conf_rate_limit_429_retry_after", [x[0] for x in r][0] == 200 and any(
        x[0] == 429 and x[1].get("retry-after") and "rate limit" in x[2].get("error", "") for x in r), [x[::2] for x in r])

    # -- preferred batch sizes: of 6 concurrent single-row requests, 4 run at once as a preferred batch
    #    (not after the 1.5 s delay), the other 2 wait for their delay
    go = threading.Barrier(6)
    pref = {}

    def pref_one(i):
        c = s.conn()
        go.wait()
        t = time.time()
        st = s.req("POST", "/v2/models/pref/infer", body8(x8[:1], id="pref-%d" % i), conn=c)[0]
        pref[i] = (st, time.time() - t)
        c.close()
    ts = [threading.Thread(target=pref_one, args=(i,)) for i in range(6)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    time.sleep(0.1)
    recs = {}
    for ln in s.logtext().splitlines():
        if '"request_id":"pref-' in ln:
            r = json.loads(ln)
            recs[r["request_id"]] = r
    bs = sorted(r["batch_size"] for r in recs.values())
    fast = [r["total_ms"] for r in recs.values() if r["batch_size"] == 4]
    check("serve_conf_preferred_batch_size_runs_at_once", all(st == 200 for st, _ in pref.values()) and len(pref) == 6
          and bs == [2, 2, 4, 4, 4, 4] and max(fast) < 1000,
          (bs, sorted((r["batch_size"], r["total_ms"]) for r in recs.values())))

    # -- a request whose data the model refuses (an index out of range) is answered 400 naming it, and
    #    the requests batched with it are not failed with it: the batch runs again one request at a time
    go = threading.Barrier(3)
    look = {}

    def look_one(i, ix):
        c = s.conn()
        go.wait()
        look[i] = s.json("POST", "/v2/models/lookup/infer", {"id": "look-%d" % i, "inputs": [
            {"name": "idx", "datatype": "INT64", "shape": [1], "data": [ix]}]}, conn=c)
        c.close()
    ts = [threading.Thread(target=look_one, args=(i, ix)) for i, ix in enumerate((1, 99, 2))]
    [t.start() for t in ts]
    [t.join() for t in ts]
    time.sleep(0.1)
    got = {i: (r[0], (r[2] or {}).get("outputs", [{}])[0].get("data") if r[0] == 200 else (r[2] or {}).get("error", ""))
           for i, r in look.items()}
    check("serve_conf_bad_request_does_not_fail_its_batch",
          got.get(0) == (200, table[1].tolist()) and got.get(2) == (200, table[2].tolist())
          and got.get(1, (0,))[0] == 400 and "99" in got[1][1] and "inference failed" not in got[1][1]
          and "a batch of 3 requests failed" in s.logtext(), got)

    # -- the background health probe runs (--probe-interval 0.3): warm-up + probes
    time.sleep(max(0.0, 1.3 - (time.time() - t_start)))
    text = s.req("GET", "/metrics")[2].decode()
    probes = metric(text, 'keel_model_probes_total{model="ids",result="success"}')
    check("serve_conf_background_probe_runs", probes is not None and probes >= 3, probes)
    # -- request log lines: JSON when stderr is not a terminal (no KEEL_LOG_FORMAT)
    lines = [ln for ln in s.logtext().splitlines() if '"msg":"request"' in ln]
    try:
        recs = [json.loads(ln) for ln in lines]
    except ValueError:
        recs = []
    check("serve_conf_request_log_json_off_terminal", any(r.get("request_id") == "all-types" and r.get("model") == "ids"
                                                          for r in recs) and len(recs) == len(lines), lines[:2])

    # -- unload while requests are running and queued: they finish (200), new ones get 503; load brings it back
    big = np.ones((2048, 1024), dtype=np.float32)

    done_at = {}

    def heavy_req(rows, into, key):
        xb = big[:rows]
        hb = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, 1024],
                                     "parameters": {"binary_data_size": xb.nbytes}}],
                         "outputs": [{"name": "y", "parameters": {"binary_data_output": True}}]}).encode()
        into[key] = s.req("POST", "/v2/models/heavy/infer", hb + xb.tobytes(),
                          {"Inference-Header-Content-Length": str(len(hb))})[0]
        done_at[key] = time.time()

    def wait_running(model):
        for _ in range(500):
            if metric(s.req("GET", "/metrics")[2].decode(), 'keel_inference_running{model="%s"}' % model) == 1:
                return True
            time.sleep(0.005)
        return False
    res = {}
    blk = threading.Thread(target=heavy_req, args=(2048, res, "blocker"))
    blk.start()
    wait_running("heavy")
    qs = [threading.Thread(target=heavy_req, args=(256, res, "queued-%d" % i)) for i in range(3)]
    for i, t in enumerate(qs):  # queued one after the other behind the blocker (256 rows: too big for the HTTP loop)
        t.start()
        for _ in range(200):
            if metric(s.req("GET", "/metrics")[2].decode(), 'keel_queue_length{model="heavy",priority="1"}') == i + 1:
                break
            time.sleep(0.005)
    stu = s.json("POST", "/v2/repository/models/heavy/unload")[0]
    stn, hn, bn = s.json("POST", "/v2/models/heavy/infer", body8(np.ones((1, 1024), np.float32)))
    blk.join(60)
    [t.join(60) for t in qs]
    check("serve_conf_unload_drains_running_and_queued", stu == 200 and res == {"blocker": 200, "queued-0": 200, "queued-1": 200,
                                                                                "queued-2": 200}
          and stn == 503, (stu, res, stn, bn))
    order = sorted(("queued-0", "queued-1", "queued-2"), key=lambda k: done_at.get(k, 1e18))
    check("serve_conf_fifo_within_a_level", order == ["queued-0", "queued-1", "queued-2"], (order, done_at))
    for _ in range(100):  # its last request's connection is done with it: freed
        if "model heavy version 1 drained and freed" in s.logtext():
            break
        time.sleep(0.02)
    freed = "model heavy version 1 drained and freed" in s.logtext()
    stl, h, bl = s.json("POST", "/v2/repository/models/heavy/load")
    check("serve_conf_unloaded_version_freed_and_reloaded", stl == 200 and freed, (stl, bl, freed))

    # -- SIGTERM: readiness false at once and new inference refused (503, Retry-After) while a running
    #    request finishes; then exit 0
    res = {}
    c1 = s.conn()
    s.req("GET", "/v2/health/live", conn=c1)
    blk = threading.Thread(target=heavy_req, args=(2048, res, "blocker"))
    blk.start()
    wait_running("heavy")
    s.signal(signal.SIGTERM)
    t0 = time.time()
    ready = []
    while time.time() - t0 < 2:
        st, h, b = s.json("GET", "/v2/health/ready", conn=c1)
        ready.append(st)
        if st != 200:
            break
        time.sleep(0.002)
    c1.close()
    st_new, h_new, b_new = s.json("POST", "/v2/models/ids/infer", {"inputs": ins})
    blk.join(60)
    check("serve_conf_sigterm_not_ready_at_once", ready and ready[-1] == 503 and "shutting down" in (b or {}).get("reason", "")
          and time.time() - t0 < 30, (ready[-3:], b))
    check("serve_conf_sigterm_new_inference_503", st_new == 503 and "shutting down" in b_new.get("error", "")
          and h_new.get("retry-after"), (st_new, h_new, b_new))
    check("serve_conf_sigterm_running_request_finishes", res.get("blocker") == 200, res)
finally:
    rc = s.stop()
check("serve_conf_exit_0", rc == 0, rc)
done()
