"""keel serve's record endpoint: POST /v1/models/M:predict runs the version's
features.json (the same executor as offline `keel features`, with the
materialized online store for entity windows) before the model. Checks the
predictions against `keel features transform` + a numpy forward pass, the
feature hash in the response, and the errors (a bad field, no features.json)."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import KEEL, Server, check, mlp_ref, tmpdir, write_mlp  # noqa: E402

import numpy as np  # noqa: E402

d = tmpdir("predict-")


def keel(*args, stdin=None):
    return subprocess.run([KEEL] + list(args), cwd=d, input=stdin, capture_output=True, text=True, timeout=300)


with open(os.path.join(d, "clicks.yaml"), "w") as f:
    f.write("""name: clicks
columns:
  - {name: user_id, type: int64, nullable: false, min: 1}
  - {name: item_price, type: float64, min: 0, max_null_ratio: 0.05}
  - {name: ts, type: timestamp, timezone: UTC, nullable: false}
  - {name: category, type: category, nullable: false, values: [books, toys, home, sports, garden, beauty]}
  - {name: clicked, type: bool, nullable: false}
""")
with open(os.path.join(d, "spec.yaml"), "w") as f:
    f.write("""label: {column: clicked, type: bool}
features:
  - {name: price_z, transform: standardize, input: item_price, type: float64, fill: 0}
  - {name: category, transform: onehot, input: category, type: string, max_size: 4}
  - {name: hour, transform: datepart, input: ts, type: timestamp, part: hour}
  - {name: user_count, transform: window, agg: count, events: 100, entity: {column: user_id, type: int64}, time: {column: ts, type: timestamp}}
""")
steps = [("gen-clicks", ["data", "gen-clicks", "clicks.csv", "--rows", "5000", "--seed", "3"]),
         ("ingest", ["ingest", "clicks.csv", "--schema", "clicks.yaml", "--out", "ds"]),
         ("fit", ["features", "fit", "spec.yaml", "--data", "ds", "--out", "f.json"]),
         ("materialize", ["features", "materialize", "f.json", "--data", "ds", "--store", "store.db"])]
for name, args in steps:
    r = keel(*args)
    if not check("predict_setup_" + name.replace("-", "_"), r.returncode == 0, r.stderr[-400:]):
        sys.exit(1)
fj = json.load(open(os.path.join(d, "f.json")))
width = fj["width"] if "width" in fj else None
records = [{"user_id": 5, "item_price": 12.5, "ts": "2024-01-01T10:00:00Z", "category": "books", "clicked": True},
           {"user_id": 17, "item_price": 3.0, "ts": "2024-01-02T23:30:00Z", "category": "beauty", "clicked": False},
           {"user_id": 99999, "item_price": 0.5, "ts": "2024-01-03T01:00:00Z", "category": "toys", "clicked": False}]
r = keel("features", "transform", "f.json", "--store", "store.db", stdin="".join(json.dumps(x) + "\n" for x in records))
check("predict_offline_vectors", r.returncode == 0, r.stderr[-400:])
X = np.array([json.loads(line) for line in r.stdout.splitlines()], dtype=np.float32)
width = X.shape[1]

repo = os.path.join(d, "repo")
params = write_mlp(os.path.join(repo, "ctr", "1", "model.onnx"), seed=4, sizes=(width, 8, 2))
shutil.copy(os.path.join(d, "f.json"), os.path.join(repo, "ctr", "1", "features.json"))
shutil.copy(os.path.join(d, "store.db"), os.path.join(repo, "ctr", "1", "features.db"))
write_mlp(os.path.join(repo, "plain", "1", "model.onnx"), seed=5, sizes=(width, 4, 2))

shutil.copytree(os.path.join(repo, "ctr"), os.path.join(repo, "nometa"))   # features, no declared post-processing
with open(os.path.join(repo, "ctr", "1", "meta.json"), "w") as f:   # what keel train declares (no files listed)
    json.dump({"output": {"postprocess": "softmax", "classes": 2}}, f)
srv = Server(repo)
try:
    st, h, body = srv.json("POST", "/v1/models/ctr:predict", {"instances": records})
    ok = st == 200 and isinstance(body, dict) and len(body.get("predictions", [])) == 3
    check("predict_answers", ok, (st, body))
    if ok:
        got = np.array(body["predictions"], dtype=np.float32)
        want = mlp_ref(params, X)
        check("predict_equals_offline_features_plus_model", got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6),
              (got, want))
        check("predict_reports_feature_hash", body.get("feature_hash") == fj["feature_hash"], body.get("feature_hash"))
    # the v2 tensor path on the same vectors gives the same numbers
    st, h, v2 = srv.json("POST", "/v2/models/ctr/infer",
                         {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(X.shape), "data": X.flatten().tolist()}]})
    check("predict_matches_v2_infer", st == 200 and ok and np.allclose(np.array(v2["outputs"][0]["data"]).reshape(3, 2),
                                                                     np.array(body["predictions"]), rtol=0, atol=0), (st, v2))
    bad = dict(records[0])
    bad["ts"] = "yesterday"
    st, h, body = srv.json("POST", "/v1/models/ctr:predict", {"instances": [records[1], bad]})
    check("predict_bad_field_400", st == 400 and "instances[1]" in str(body) and "ts" in str(body), (st, body))
    # probabilities and labels from the version's declared post-processing
    st, h, body = srv.json("POST", "/v1/models/ctr:predict", {"instances": records, "outputs": ["logit", "probability", "label"]})
    ok = st == 200 and len(body.get("predictions", [])) == 3
    if ok:
        z = np.array([p["logit"] for p in body["predictions"]], dtype=np.float64)
        pz = np.exp(z - z.max(axis=1, keepdims=True))
        pz /= pz.sum(axis=1, keepdims=True)
        got_p = np.array([p["probability"] for p in body["predictions"]])
        ok = np.allclose(got_p, pz, rtol=1e-6, atol=1e-7) and [p["label"] for p in body["predictions"]] == list(z.argmax(axis=1))
    check("predict_probability_and_label", ok, (st, body))
    st, h, body = srv.json("POST", "/v1/models/ctr:predict", {"instances": records, "outputs": ["label"]})
    check("predict_label_only", st == 200 and all(set(p) == {"label"} for p in body.get("predictions", [{}])), (st, body))
    st, h, body = srv.json("POST", "/v1/models/ctr:predict", {"instances": records, "outputs": ["odds"]})
    check("predict_unknown_output_400", st == 400 and "odds" in str(body), (st, body))
    st, h, meta = srv.json("GET", "/v2/models/ctr")
    fields = {f["name"]: f for f in (meta or {}).get("predict", {}).get("fields", [])}
    check("predict_metadata_describes_records", st == 200 and set(fields) == {"user_id", "item_price", "ts", "category"}
          and fields["ts"]["type"] == "timestamp" and fields["ts"]["timezone"] == "UTC" and fields["ts"]["nullable"] is False
          and fields["category"]["type"] == "category" and meta["predict"]["outputs"] == ["logit", "probability", "label"],
          meta)
    st, h, body = srv.json("POST", "/v1/models/ctr:predict", {"rows": []})
    check("predict_missing_instances_400", st == 400 and "instances" in str(body), (st, body))
    st, h, body = srv.json("POST", "/v1/models/nometa:predict", {"instances": records, "outputs": ["probability"]})
    check("predict_probability_needs_declared_postprocess_400", st == 400 and "post-processing" in str(body), (st, body))
    st, h, body = srv.json("POST", "/v1/models/nometa:predict", {"instances": records, "outputs": ["logit"]})
    check("predict_logit_without_declaration", st == 200 and "logit" in str(body), (st, body))
    st, h, body = srv.json("POST", "/v1/models/plain:predict", {"instances": records})
    check("predict_without_features_json_400", st == 400 and "features.json" in str(body), (st, body))
    st, h, body = srv.json("POST", "/v1/models/nosuch:predict", {"instances": records})
    check("predict_unknown_model_404", st == 404, (st, body))
    # :predict is accounted like v2 infer: three bad :predict calls and one bad v2 call are four
    # bad_request results of the model's version, and every request has its access-log line
    import re
    import time

    def ctr_count(result):
        text = srv.req("GET", "/metrics")[2].decode()
        return sum(int(line.split()[-1]) for line in text.splitlines()
                   if re.match(r'keel_inference_requests_total\{model="ctr",version="1",result="%s"\}' % result, line))
    def bad_lines():   # access-log lines of ctr's 400 answers
        n = 0
        for line in srv.logtext().splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            n += d.get("msg") == "request" and d.get("model") == "ctr" and d.get("status") == 400
        return n
    def settled_bad_lines():   # the access log is written off the request path (every 2 ms): wait until it is still
        n, deadline = bad_lines(), time.time() + 5
        while time.time() < deadline:
            time.sleep(0.1)
            m = bad_lines()
            if m == n:
                return n
            n = m
        return n
    before, lines_before = ctr_count("bad_request"), settled_bad_lines()
    for k in range(3):
        srv.json("POST", "/v1/models/ctr:predict", {"instances": [bad]})
    srv.json("POST", "/v2/models/ctr/infer", {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]})
    check("predict_errors_counted_like_infer", ctr_count("bad_request") - before == 4, ctr_count("bad_request") - before)
    check("predict_success_counted_with_version", ctr_count("success") >= 1, ctr_count("success"))
    deadline = time.time() + 10
    while time.time() < deadline and bad_lines() - lines_before < 4:
        time.sleep(0.1)
    check("predict_requests_in_access_log", settled_bad_lines() - lines_before == 4, srv.logtext()[-800:])
finally:
    log = srv.logtext()[-400:]
    check("predict_server_exits_cleanly", srv.stop() == 0, log)
