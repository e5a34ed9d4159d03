"""keel ingest of http:// sources against a small Range-capable HTTP server on
127.0.0.1: a connection dropped mid-transfer is resumed with a Range request;
a server that keeps dying fails cleanly (nothing published, the partial file
kept) and the next run resumes from it; Content-MD5 and --sha256 are checked."""
import base64
import hashlib
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylib"))
import report as rep  # noqa: E402
from report import report  # noqa: E402

SRC = os.environ.get("KEEL_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
KEEL = os.environ.get("KEEL", os.path.join(SRC, "build", "keel"))
TMP = tempfile.mkdtemp(prefix="ingest-url-", dir=os.environ.get("KEEL_TEST_TMP"))


def keel(*args, env=None):
    e = dict(os.environ, KEEL_FETCH_RETRIES="3")
    if env:
        e.update(env)
    return subprocess.run([KEEL, *args], capture_output=True, text=True, timeout=300, env=e)


csv = os.path.join(TMP, "clicks.csv")
r = keel("data", "gen-clicks", csv, "--rows", "20000", "--seed", "3")
report("ingest_url_gen", r.returncode == 0, r.stderr)
BODY = open(csv, "rb").read()
SHA = hashlib.sha256(BODY).hexdigest()
MD5 = base64.b64encode(hashlib.md5(BODY).digest()).decode()
ETAG = '"' + SHA[:16] + '"'
log = []          # (path, range header)
state = {"dead": True}


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        rng = self.headers.get("Range")
        log.append((self.path, rng))
        mode = self.path.split("/")[1]
        start = 0
        if rng and rng.startswith("bytes=") and mode != "norange":
            start = int(rng[6:].split("-")[0])
            if start >= len(BODY):
                self.send_response(416)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(BODY) - 1}/{len(BODY)}")
        else:
            self.send_response(200)
            if mode != "norange":
                self.send_header("Accept-Ranges", "bytes")
        body = BODY[start:]
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", ETAG)
        if start == 0:
            self.send_header("Content-MD5", MD5 if mode != "badmd5" else base64.b64encode(b"x" * 16).decode())
        self.end_headers()
        cut = None
        if mode == "drop" and start == 0:
            cut = len(body) * 2 // 5          # first request dies at 40 %
        if mode == "dead" and state["dead"]:
            cut = min(len(body), 64 * 1024)   # every request dies after 64 KiB
        if cut is not None:
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass
            return
        self.wfile.write(body)


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
base = f"http://127.0.0.1:{srv.server_address[1]}"
schema = os.path.join(TMP, "clicks.yaml")
with open(schema, "w") as f:
    f.write("""columns:
  - {name: user_id, type: int64, nullable: false}
  - {name: item_price, type: float64}
  - {name: ts, type: timestamp, timezone: UTC}
  - {name: category, type: category}
  - {name: clicked, type: bool}
""")

# 1. dropped connection, resumed with Range
out = os.path.join(TMP, "d1")
r = keel("ingest", base + "/drop/clicks.csv", "--schema", schema, "--out", out, "--json")
report("ingest_url_dropped_connection_resumes", r.returncode == 0, r.stderr)
ranges = [g for p, g in log if p.startswith("/drop/")]
report("ingest_url_used_range", len(ranges) >= 2 and ranges[0] is None and ranges[1] == f"bytes={len(BODY) * 2 // 5}-",
       f"requests: {ranges}")
if r.returncode == 0:
    res = json.loads(r.stdout)
    m = json.load(open(os.path.join(res["path"], "manifest.json")))
    report("ingest_url_manifest_source", m["sources"][0]["sha256"] == SHA and m["sources"][0]["name"].endswith("/drop/clicks.csv")
           and m["rows"]["accepted"] == 20000, json.dumps(m["sources"]))

# 2. a server that keeps dying: clean failure, partial kept; then resume
out = os.path.join(TMP, "d2")
r = keel("ingest", base + "/dead/clicks.csv", "--schema", schema, "--out", out)
report("ingest_url_dead_server_fails", r.returncode == 1 and "download incomplete" in r.stderr, r.stderr)
report("ingest_url_dead_publishes_nothing", not os.path.exists(os.path.join(out, "current")), "current exists")
parts = [os.path.join(dp, f) for dp, _, fs in os.walk(out) for f in fs if f.endswith(".part")]
have = os.path.getsize(parts[0]) if parts else 0
report("ingest_url_partial_kept", have > 0, f"parts: {parts}")
state["dead"] = False
n0 = len(log)
r = keel("ingest", base + "/dead/clicks.csv", "--schema", schema, "--out", out, "--sha256", SHA)
report("ingest_url_resume_next_run", r.returncode == 0, r.stderr)
later = [g for p, g in log[n0:]]
report("ingest_url_resume_from_partial", later[:1] == [f"bytes={have}-"], f"requests {later}, had {have}")

# 3. transport checks
r = keel("ingest", base + "/badmd5/clicks.csv", "--schema", schema, "--out", os.path.join(TMP, "d3"))
report("ingest_url_content_md5_mismatch", r.returncode == 1 and "Content-MD5 mismatch" in r.stderr, r.stderr)
r = keel("ingest", base + "/ok/clicks.csv", "--schema", schema, "--out", os.path.join(TMP, "d4"), "--sha256", "0" * 64)
report("ingest_url_sha256_mismatch", r.returncode == 1 and "sha256 mismatch" in r.stderr
       and not os.path.exists(os.path.join(TMP, "d4", "current")), r.stderr)
# a server without Range support: the resume falls back to a full download
r = keel("ingest", base + "/norange/clicks.csv", "--schema", schema, "--out", os.path.join(TMP, "d5"))
report("ingest_url_plain_server", r.returncode == 0, r.stderr)
r = keel("ingest", "http://127.0.0.1:1/none.csv", "--schema", schema, "--out", os.path.join(TMP, "d6"),
         env={"KEEL_FETCH_RETRIES": "0"})
report("ingest_url_refused", r.returncode == 1 and "127.0.0.1:1" in r.stderr, r.stderr)
srv.shutdown()
sys.exit(1 if rep.failed else 0)
