"""Helpers of the serve integration tests (tests/integration/serve_*.py):
PASS/FAIL reporting, starting the real `keel serve` binary on 127.0.0.1 with
port 0, small HTTP clients on http.client, and the test MLP written with
onnx.helper (784-512-512-10, random weights) plus its numpy reference."""
import http.client
import json
import os
import select
import signal
import subprocess
import sys
import tempfile

KEEL = os.environ.get("KEEL", "build/keel")
TMP = os.environ.get("KEEL_TEST_TMP", tempfile.gettempdir())
failures = 0


def check(name, ok, why=""):
    global failures
    if ok:
        print("PASS " + name, flush=True)
    else:
        failures += 1
        print("FAIL %s: %s" % (name, str(why)[:600]), flush=True)
    return ok


def tmpdir(prefix):
    return tempfile.mkdtemp(prefix=prefix, dir=TMP)


class Server:
    """keel serve REPO --port 0 ...; the port is read from the first line. The log is
    JSON (KEEL_LOG_FORMAT=json) unless env says otherwise; env values None unset."""

    def __init__(self, repo, *args, env=None):
        self.log_path = os.path.join(tmpdir("serve-log-"), "stderr.log")
        self.log = open(self.log_path, "w")
        e = dict(os.environ)
        e["KEEL_LOG_FORMAT"] = "json"
        for k, v in (env or {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        self.p = subprocess.Popen([KEEL, "serve", repo, "--port", "0"] + list(args), stdout=subprocess.PIPE,
                                  stderr=self.log, env=e)
        r, _, _ = select.select([self.p.stdout], [], [], 60)
        line = self.p.stdout.readline().decode() if r else ""
        if "listening on" not in line:
            self.p.kill()
            raise RuntimeError("keel serve did not start: %r; log: %s" % (line, self.logtext()[-800:]))
        self.port = int(line.strip().rsplit(":", 1)[1])

    def logtext(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def req(self, method, path, body=None, headers=None, conn=None):
        c = conn or self.conn()
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        if conn is None:
            c.close()
        return r.status, hdrs, data

    def json(self, method, path, body=None, headers=None, conn=None):
        st, h, data = self.req(method, path, body, headers, conn)
        try:
            return st, h, json.loads(data) if data else None
        except ValueError:
            return st, h, data

    def signal(self, sig):
        self.p.send_signal(sig)

    def stop(self, timeout=40):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        self.log.close()
        return rc


def write_mlp(path, seed=0, sizes=(784, 512, 512, 10), batch="N"):
    """Writes an MLP (Gemm+Relu, last Gemm without) and returns its weights."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    nodes, inits, params = [], [], []
    cur = "x"
    for i in range(len(sizes) - 1):
        w = (rng.standard_normal((sizes[i], sizes[i + 1])) / np.sqrt(sizes[i])).astype(np.float32)
        b = (rng.standard_normal(sizes[i + 1]) * 0.1).astype(np.float32)
        params.append((w, b))
        inits += [numpy_helper.from_array(w, "w%d" % i), numpy_helper.from_array(b, "b%d" % i)]
        out = "y" if i == len(sizes) - 2 else "h%d" % i
        pre = out if i == len(sizes) - 2 else "g%d" % i
        nodes.append(helper.make_node("Gemm", [cur, "w%d" % i, "b%d" % i], [pre]))
        if i != len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [pre], [out]))
        cur = out
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, sizes[0]])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, sizes[-1]])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(m, path)
    return params


def mlp_ref(params, x):
    import numpy as np
    h = x.astype(np.float32)
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i != len(params) - 1:
            h = np.maximum(h, 0)
    return h


def sha256(path):
    import hashlib
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write_meta(vdir, files=("model.onnx",), override=None):
    meta = {"files": {f: sha256(os.path.join(vdir, f)) for f in files}}
    if override:
        meta["files"].update(override)
    with open(os.path.join(vdir, "meta.json"), "w") as f:
        json.dump(meta, f)


def done():
    sys.exit(1 if failures else 0)


# ------------------------------------------------------------------ the monitored clicks model
# (serve_monitor.py, monitor_alerts.py, serve_predlog.py): three features of the click generator and a small
# BCE model on them, trained on a features dataset with an 80/20 split
CLICKS_FEATURES = """label: {column: clicked, type: int32}
features:
  - {name: price_z, transform: standardize, input: item_price, type: float64, fill: 0}
  - {name: log_price, transform: log1p, input: item_price, type: float64, fill: 0}
  - {name: cat, transform: onehot, input: category, type: string}
"""


def clicks_model_spec(dataset):
    """the training spec of the clicks model on a features dataset folder"""
    return """seed: 1
input: {shape: [9]}
layers:
  - {type: linear, out: 8}
  - {type: relu}
  - {type: linear, out: 1}
loss: {type: bce_with_logits}
optimizer: {type: adamw, lr: 0.01}
train: {epochs: 2, batch_size: 64}
data:
  dataset: %s
  label: clicked
  split: {train: 0.8, val: 0.2, test: 0.0, shuffle: false}
""" % dataset


def clicks_model_steps(d):
    """writes spec.yaml and model.yaml into d; the keel commands (name, args) that fit the features on 6,000
    generated rows (f/features.json), apply them (fds) and train the model (model), run in d"""
    with open(os.path.join(d, "spec.yaml"), "w") as f:
        f.write(CLICKS_FEATURES)
    with open(os.path.join(d, "model.yaml"), "w") as f:
        f.write(clicks_model_spec("fds"))
    os.makedirs(os.path.join(d, "f"), exist_ok=True)
    return [("fit", ["features", "fit", "spec.yaml", "--data", "clickgen:6000:1", "--out", "f/features.json"]),
            ("apply", ["features", "apply", "f/features.json", "--data", "clickgen:6000:1", "--out", "fds"]),
            ("train", ["train", "model.yaml", "--out", "model"])]
