"""keel serve: protocol and operations tests that need no model execution —
health and metadata endpoints, error answers (404, 405, 413, 503, malformed
requests), integrity refusal from meta.json, repository index/load/unload,
SIGHUP rescans, slowloris connections timing out, `promtool check metrics`
on the live endpoint, and SIGTERM exiting 0. Starts the real binary."""
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import Server, check, done, tmpdir, write_meta  # noqa: E402

repo = tmpdir("serve-repo-")
# a model whose files do not match its meta.json: refused before loading
os.makedirs(os.path.join(repo, "tampered", "1"))
with open(os.path.join(repo, "tampered", "1", "model.onnx"), "wb") as f:
    f.write(b"not the model meta.json describes")
write_meta(os.path.join(repo, "tampered", "1"), override={"model.onnx": "0" * 64})
# a model that is not valid ONNX: refused by the runtime (or the build without one)
os.makedirs(os.path.join(repo, "broken", "1"))
with open(os.path.join(repo, "broken", "1", "model.onnx"), "wb") as f:
    f.write(b"\x08\x07garbage")
# a model with a bad config.yaml
os.makedirs(os.path.join(repo, "badcfg", "1"))
shutil.copy(os.path.join(repo, "broken", "1", "model.onnx"), os.path.join(repo, "badcfg", "1", "model.onnx"))
with open(os.path.join(repo, "badcfg", "config.yaml"), "w") as f:
    f.write("max_batch_size: 4\nmax_bach: 8\n")

s = Server(repo, "--conn-timeout", "1", "--header-timeout", "2", "--min-body-rate", "2000", "--max-body", "4096",
           "--probe-interval", "1")
try:
    st, h, b = s.json("GET", "/v2/health/live")
    check("serve_http_live", st == 200 and b == {"live": True}, (st, b))
    st, h, b = s.json("GET", "/v2")
    check("serve_http_server_metadata", st == 200 and b.get("name") == "keel" and "binary_tensor_data" in b.get("extensions", []), b)
    st, h, b = s.json("GET", "/v2/health/ready")
    check("serve_http_ready_strict", st == 503 and b.get("ready") is False and "not ready" in b.get("reason", "")
          and "retry-after" in h, (st, b))
    st, h, b = s.json("POST", "/v2/repository/index")
    states = {m["name"]: m for m in b} if st == 200 else {}
    check("serve_http_repository_index", st == 200 and set(states) == {"tampered", "broken", "badcfg"}
          and all(m["state"] == "UNAVAILABLE" for m in states.values()), b)
    check("serve_http_integrity_refused", "sha256" in states.get("tampered", {}).get("reason", "")
          and "meta.json says" in states.get("tampered", {}).get("reason", ""), states.get("tampered"))
    log = s.logtext()
    check("serve_http_integrity_logged", "tampered version 1 refused" in log and "sha256" in log, log[-500:])
    check("serve_http_bad_config_names_key", "max_bach" in states.get("badcfg", {}).get("reason", "") and
          "config.yaml:2" in states.get("badcfg", {}).get("reason", ""), states.get("badcfg"))
    st, h, b = s.json("GET", "/v2/models/tampered")
    check("serve_http_model_meta_not_ready", st == 503 and "sha256" in b.get("error", "") and h.get("retry-after"), (st, b))
    st, h, b = s.json("GET", "/v2/models/tampered/ready")
    check("serve_http_model_ready_false", st == 503 and b.get("ready") is False, (st, b))
    st, h, b = s.json("POST", "/v2/models/tampered/infer", {"inputs": []})
    check("serve_http_infer_not_ready_503", st == 503 and "error" in b and h.get("retry-after"), (st, b))
    st, h, b = s.json("GET", "/v2/models/nope")
    check("serve_http_unknown_model_404", st == 404 and "nope" in b.get("error", ""), (st, b))
    st, h, b = s.json("POST", "/v2/models/nope/versions/3/infer", {"inputs": []})
    check("serve_http_unknown_model_infer_404", st == 404 and "nope" in b.get("error", ""), (st, b))
    st, h, b = s.json("GET", "/v2/nothing/here")
    check("serve_http_unknown_endpoint_404", st == 404 and "error" in b, (st, b))
    st, h, b = s.json("GET", "/v2/models/broken/infer")
    check("serve_http_wrong_method_405", st == 405 and "error" in b, (st, b))
    st, h, b = s.json("POST", "/v2/models/broken/infer", "x" * 5000)
    check("serve_http_body_over_limit_413", st == 413 and "limit" in b.get("error", ""), (st, b))
    # chunked upload (no Content-Length) over the limit
    c = s.conn()
    c.putrequest("POST", "/v2/models/broken/infer")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    for _ in range(3):
        c.send(b"800\r\n" + b"a" * 0x800 + b"\r\n")
    c.send(b"0\r\n\r\n")
    r = c.getresponse()
    r.read()
    check("serve_http_chunked_over_limit_413", r.status == 413, r.status)
    c.close()
    st, h, b = s.json("POST", "/v1/models/broken:predict", {"instances": [{"a": 1}]})
    check("serve_http_predict_not_ready_503", st == 503 and "not ready" in b.get("error", ""), (st, b))
    # malformed HTTP
    sk = socket.create_connection(("127.0.0.1", s.port), timeout=5)
    sk.sendall(b"THIS IS NOT HTTP\r\n\r\n")
    resp = sk.recv(200)
    sk.close()
    check("serve_http_malformed_request_400", resp.startswith(b"HTTP/1.1 400") or resp == b"", resp[:60])
    # slowloris: a connection that never finishes its headers is closed after --conn-timeout
    sk = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    sk.sendall(b"POST /v2/models/broken/infer HTTP/1.1\r\nHost: x\r\n")
    t0 = time.time()
    st, h, b = s.json("GET", "/v2/health/live")  # others are served meanwhile
    try:
        got = sk.recv(100)
    except (ConnectionResetError, socket.timeout):
        got = b""
    waited = time.time() - t0
    sk.close()
    check("serve_http_slowloris_closed", got == b"" and waited < 8 and st == 200, (got, waited))
    # trickling slowloris: a byte every 0.4 s keeps the 1 s idle timeout from firing, yet the request
    # line + headers must be in within --header-timeout 2 and a body must keep --min-body-rate 2000
    def closed(sk):
        r, _, _ = select.select([sk], [], [], 0)
        if not r:
            return False
        try:
            return sk.recv(100) == b""
        except OSError:
            return True
    hs = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    hs.sendall(b"POST /v2/models/broken/infer HTTP/1.1\r\n")
    bs = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    bs.sendall(b"POST /v2/models/broken/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\n\r\n")
    t0, cut, served = time.time(), {}, []
    while len(cut) < 2 and time.time() - t0 < 8:
        for name, sk, data in (("head", hs, b"X-Slow: 1\r\n"), ("body", bs, b"a" * 10)):
            if name in cut:
                continue
            if closed(sk):
                cut[name] = time.time() - t0
                continue
            try:
                sk.sendall(data)
            except OSError:
                cut[name] = time.time() - t0
        st, h, b = s.json("GET", "/v2/health/live")  # others are served meanwhile
        served.append(st)
        time.sleep(0.4)
    hs.close()
    bs.close()
    check("serve_http_slowloris_trickled_headers_cut", 1.5 < cut.get("head", 99) < 5, cut)
    check("serve_http_slowloris_trickled_body_cut", 1.5 < cut.get("body", 99) < 5, cut)
    check("serve_http_slowloris_others_served", len(served) >= 3 and all(x == 200 for x in served), served)
    # unload: a model explicitly unloaded no longer counts for readiness
    for m in ("tampered", "broken", "badcfg"):
        st, h, b = s.json("POST", "/v2/repository/models/%s/unload" % m)
        if st != 200:
            break
    check("serve_http_unload", st == 200, (st, b))
    st, h, b = s.json("GET", "/v2/health/ready")
    check("serve_http_ready_after_unload", st == 200 and b.get("ready") is True, (st, b))
    st, h, b = s.json("POST", "/v2/repository/index")
    check("serve_http_index_unloaded", st == 200 and all(m["state"] == "UNLOADED" for m in b), b)
    st, h, b = s.json("POST", "/v2/repository/models/tampered/load")
    check("serve_http_load_refused_400", st == 400 and "sha256" in b.get("error", ""), (st, b))
    st, h, b = s.json("POST", "/v2/repository/models/ghost/load")
    check("serve_http_load_unknown_404", st == 404, (st, b))
    # SIGHUP rescans: a new model folder appears in the index
    os.makedirs(os.path.join(repo, "fresh", "1"))
    shutil.copy(os.path.join(repo, "broken", "1", "model.onnx"), os.path.join(repo, "fresh", "1", "model.onnx"))
    s.signal(signal.SIGHUP)
    names = []
    for _ in range(50):
        st, h, b = s.json("POST", "/v2/repository/index")
        names = [m["name"] for m in b]
        if "fresh" in names:
            break
        time.sleep(0.1)
    check("serve_http_sighup_rescan", "fresh" in names, names)
    # metrics: promtool accepts the live endpoint
    st, h, body = s.req("GET", "/metrics")
    text = body.decode()
    try:
        p = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60)
        ok, why = p.returncode == 0, (p.stdout + p.stderr).decode()
    except FileNotFoundError:
        ok, why = False, "promtool not installed (Debian package prometheus; make deps)"
    check("serve_http_promtool_check_metrics", st == 200 and ok, why)
    check("serve_http_metrics_content", all(k in text for k in (
        "keel_inference_request_duration_seconds_bucket", "keel_queue_length", "keel_memory_allocated_bytes",
        "keel_memory_budget_bytes", "process_cpu_seconds_total", "keel_model_loads_total",
        'keel_http_requests_failed_total{reason="not_found"}', "keel_inference_batch_size_bucket",
        "keel_process_cpu_utilisation_ratio", "keel_inference_queue_duration_seconds_bucket",
        "keel_inference_compute_duration_seconds_bucket", "keel_model_probes_total", "keel_serving_memory_budget_bytes")),
        text[:300])
    cuts = {l.split('"')[1]: int(l.rsplit(" ", 1)[1]) for l in text.splitlines()
            if l.startswith("keel_http_connections_cut_total{")}
    check("serve_http_metrics_slow_clients_cut", cuts.get("header_timeout", 0) >= 1 and cuts.get("slow_body", 0) >= 1, cuts)
    fails = [int(l.rsplit(" ", 1)[1]) for l in text.splitlines()
             if l.startswith('keel_model_loads_total{model="tampered",result="failure"}')]
    check("serve_http_metrics_counted_failures", fails and fails[0] >= 2, fails)  # start-up + explicit load
finally:
    t0 = time.time()
    rc = s.stop()
check("serve_http_sigterm_exit_0", rc == 0 and time.time() - t0 < 10, rc)
p = subprocess.run([os.environ.get("KEEL", "build/keel"), "--tracking", tmpdir("serve-store-"), "serve", "ghost@champion"],
                   capture_output=True, text=True)
check("serve_http_registry_unknown_ref", p.returncode == 1 and "ghost" in p.stderr, (p.returncode, p.stderr))
done()
