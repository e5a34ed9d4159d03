"""The one raw-value grammar through the real server: rows a user wrote
themselves (mixed offsets, naive times in America/New_York across a DST edge,
`NA` nulls, numbers as strings, exponent floats) go through `keel ingest` +
`keel features apply` and, as JSON records in other spellings of the same
values, through `POST /v1/models/M:predict`. The predictions must equal the
v2 `infer` of the offline feature vectors exactly, and a record ingest rejects
gets a 400 with ingest's reason."""
import json
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import KEEL, Server, check, tmpdir, write_mlp  # noqa: E402

import numpy as np  # noqa: E402

d = tmpdir("predict-grammar-")
rng = random.Random(1201)


def keel(*args, stdin=None):
    return subprocess.run([KEEL] + list(args), cwd=d, input=stdin, capture_output=True, text=True, timeout=300)


with open(os.path.join(d, "schema.yaml"), "w") as f:
    f.write("""name: orders
dialect: {format: csv, header: true, null: ["", NA, N/A]}
columns:
  - {name: user, type: int64, nullable: false}
  - {name: price, type: float64}
  - {name: ts, type: timestamp, timezone: America/New_York, nullable: false}
  - {name: cat, type: category}
""")
with open(os.path.join(d, "spec.yaml"), "w") as f:
    f.write("""features:
  - {name: price_z, transform: standardize, input: price, type: float64, fill: 0}
  - {name: hour, transform: datepart, input: ts, type: timestamp, part: hour}
  - {name: dow, transform: datepart, input: ts, type: timestamp, part: weekday}
  - {name: cat, transform: onehot, input: cat, type: string, nullable: true, max_size: 3}
  - {name: user_h, transform: hash_bucket, input: user, type: int64, buckets: 50}
""")


def spell_ts(utc_secs):
    """Returns (CSV text, JSON value) of one instant in two different spellings."""
    import datetime as dt
    from zoneinfo import ZoneInfo
    t = dt.datetime.fromtimestamp(utc_secs, dt.timezone.utc)
    ny = t.astimezone(ZoneInfo("America/New_York"))
    off = ny.strftime("%z")
    off = off[:3] + ":" + off[3:]
    forms = [t.strftime("%Y-%m-%dT%H:%M:%SZ"), t.strftime("%Y-%m-%dT%H:%M:%S+00:00"),
             ny.strftime("%Y-%m-%dT%H:%M:%S") + off, ny.strftime("%Y-%m-%dT%H:%M:%S.000") + off,
             ny.strftime("%Y-%m-%d %H:%M:%S")]   # naive: read in the schema's zone
    a, b = rng.sample(forms, 2)
    return a, (b if rng.random() < 0.7 else utc_secs * 1000000)


rows, records = [], []
base = 1709964000   # 2024-03-09T06:00Z: the day before New York's spring-forward
for i in range(240):
    user = rng.randint(1, 30)
    price = None if rng.random() < 0.1 else round(rng.uniform(0, 300), 2)
    cat = None if rng.random() < 0.1 else rng.choice(["books", "toys", "home", "garden"])
    ts_csv, ts_json = spell_ts(base + rng.randint(0, 2 * 86400))
    rows.append([str(user) if rng.random() < 0.5 else "+%d" % user,
                 "NA" if price is None else ("%.2f" % price if rng.random() < 0.5 else "%.6e" % price),
                 ts_csv, "NA" if cat is None else cat])
    records.append({"user": user if rng.random() < 0.5 else str(user),
                    "price": (None if rng.random() < 0.5 else "NA") if price is None else
                             (price if rng.random() < 0.5 else "%.4E" % price),
                    "ts": ts_json, "cat": cat})
with open(os.path.join(d, "orders.csv"), "w") as f:
    f.write("user,price,ts,cat\n" + "".join(",".join(r) + "\n" for r in rows))

steps = [("ingest", ["ingest", "orders.csv", "--schema", "schema.yaml", "--out", "ds"]),
         ("fit", ["features", "fit", "spec.yaml", "--data", "ds", "--out", "f.json"]),
         ("apply", ["features", "apply", "f.json", "--data", "ds", "--out", "x.parquet"])]
for name, args in steps:
    r = keel(*args)
    if not check("predict_grammar_setup_" + name, r.returncode == 0, r.stderr[-600:]):
        sys.exit(1)
fj = json.load(open(os.path.join(d, "f.json")))
raw_ts = [c for c in fj.get("raw", {}).get("columns", []) if c.get("name") == "ts"]
check("predict_grammar_features_record_raw_schema", raw_ts and raw_ts[0].get("timezone") == "America/New_York"
      and "NA" in fj["raw"]["dialect"]["null"], fj.get("raw"))
r = keel("data", "head", "x.parquet", "--json", "-n", str(len(rows)))
X = np.array([list(json.loads(line).values()) for line in r.stdout.splitlines()], dtype=np.float32)
check("predict_grammar_offline_rows", X.shape[0] == len(rows), X.shape)

repo = os.path.join(d, "repo")
write_mlp(os.path.join(repo, "orders", "1", "model.onnx"), seed=7, sizes=(X.shape[1], 8, 2))
shutil.copy(os.path.join(d, "f.json"), os.path.join(repo, "orders", "1", "features.json"))
srv = Server(repo)
try:
    st, h, body = srv.json("POST", "/v1/models/orders:predict", {"instances": records})
    ok = st == 200 and len(body.get("predictions", [])) == len(records)
    check("predict_grammar_answers", ok, (st, str(body)[:400]))
    st2, h, v2 = srv.json("POST", "/v2/models/orders/infer",
                          {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(X.shape), "data": X.flatten().tolist()}]})
    if ok and st2 == 200:
        got = np.array(body["predictions"], dtype=np.float32)
        want = np.array(v2["outputs"][0]["data"], dtype=np.float32).reshape(got.shape)
        bad = [i for i in range(len(records)) if not np.array_equal(got[i], want[i])]
        check("predict_grammar_equals_apply_plus_infer", not bad,
              "rows %s differ, e.g. CSV %s / record %s" % (bad[:5], rows[bad[0]] if bad else "", records[bad[0]] if bad else ""))
    else:
        check("predict_grammar_equals_apply_plus_infer", False, (st2, str(v2)[:300]))
    # what ingest rejects, :predict rejects with the same reason
    gap = dict(records[0], ts="2024-03-10 02:30:00")
    with open(os.path.join(d, "gap.csv"), "w") as f:
        f.write("user,price,ts,cat\n1,2,2024-03-10 02:30:00,toys\n")
    r = keel("ingest", "gap.csv", "--schema", "schema.yaml", "--out", "ds2")
    st, h, body = srv.json("POST", "/v1/models/orders:predict", {"instances": [gap]})
    reason = "'2024-03-10 02:30:00' does not exist in America/New_York"
    check("predict_grammar_rejects_like_ingest", st == 400 and reason in str(body), (st, body))
    check("predict_grammar_ingest_gives_the_same_reason", r.returncode != 0 and reason in r.stderr, r.stderr[-300:])
finally:
    log = srv.logtext()[-400:]
    check("predict_grammar_server_exits_cleanly", srv.stop() == 0, log)
