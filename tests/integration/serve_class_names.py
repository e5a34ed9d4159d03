"""A string label end to end (issue 23: class names from training): features
fit learns the label's classes (sorted), apply writes their int32 index and
the dataset manifest their names, keel train checks them against the loss and
the last layer and writes them into meta.json (output.class_names), and
keel serve's :predict answers "label" with the class's name and lists the
names in GET /v2/models/M. A class that fit never saw is refused by apply,
naming the value; a model whose outputs do not match the classes is refused
before training."""
import json
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import KEEL, Server, check, done, tmpdir  # noqa: E402

d = tmpdir("classes-")


def keel(*args, stdin=None):
    return subprocess.run([KEEL] + list(args), cwd=d, input=stdin, capture_output=True, text=True, timeout=300)


def write(name, text):
    with open(os.path.join(d, name), "w") as f:
        f.write(text)


# three separable classes by x1 (and noise in x2); names not in index order on purpose
rng = random.Random(7)
names = {0: "virginica", 1: "setosa", 2: "versicolor"}
rows = ["x1,x2,species"]
for i in range(1500):
    k = i % 3
    rows.append("%.4f,%.4f,%s" % (k * 3.0 + rng.gauss(0, 0.4), rng.gauss(0, 1), names[k]))
write("iris.csv", "\n".join(rows) + "\n")
write("iris.yaml", """name: iris
columns:
  - {name: x1, type: float64, nullable: false}
  - {name: x2, type: float64, nullable: false}
  - {name: species, type: string, nullable: false}
""")
write("spec.yaml", """label: {column: species, type: string}
features:
  - {name: x1z, transform: standardize, input: x1, type: float64}
  - {name: x2z, transform: standardize, input: x2, type: float64}
""")
write("model.yaml", """seed: 3
input: {shape: [2]}
layers:
  - {type: linear, out: 16}
  - {type: relu}
  - {type: linear, out: %d}
loss: {type: cross_entropy}
optimizer: {type: adamw, lr: 0.02}
train: {epochs: 8, batch_size: 32, val_fraction: 0.2}
data: {dataset: fds, label: species}
""")
for name, args in [("ingest", ["ingest", "iris.csv", "--schema", "iris.yaml", "--out", "ds"]),
                   ("fit", ["features", "fit", "spec.yaml", "--data", "ds", "--out", "f.json"]),
                   ("apply", ["features", "apply", "f.json", "--data", "ds", "--out", "fds"])]:
    r = keel(*args)
    if not check("classes_setup_" + name, r.returncode == 0, r.stderr[-500:]):
        done()
        sys.exit(1)
want = sorted(names.values())
fj = json.load(open(os.path.join(d, "f.json")))
check("classes_fit_learns_sorted_names", fj["label"].get("classes") == want, fj["label"])
man = json.load(open(os.path.join(d, "fds", "manifest.json")))
check("classes_in_dataset_manifest", man.get("label_classes") == want, man.get("label_classes"))

spec = open(os.path.join(d, "model.yaml")).read()
write("m4.yaml", spec % 4)
r = keel("train", "m4.yaml", "--out", "m4")
check("classes_mismatched_outputs_refused", r.returncode != 0 and "3 classes" in r.stderr and "4 outputs" in r.stderr, r.stderr[-400:])
write("m3.yaml", spec % 3)
r = keel("train", "m3.yaml", "--out", "m3")
check("classes_train", r.returncode == 0, r.stderr[-400:])
meta = json.load(open(os.path.join(d, "m3", "meta.json")))
check("classes_meta_declares_names", meta.get("output", {}).get("class_names") == want, meta.get("output"))

r = keel("eval", "m3", "--split", "all", "--json")
ev = json.loads(r.stdout) if r.returncode == 0 else {}
check("classes_eval_names_per_class", ev.get("class_names") == want and [c.get("name") for c in ev.get("per_class", [])] == want,
      (r.stderr[-300:], ev.get("per_class")))

# a class the features were not fitted on: apply refuses, naming it
with open(os.path.join(d, "iris.csv"), "a") as f:
    f.write("1.0,0.0,iris-nova\n")
r = keel("ingest", "iris.csv", "--schema", "iris.yaml", "--out", "ds2")
r = keel("features", "apply", "f.json", "--data", "ds2", "--out", "fds2") if r.returncode == 0 else r
check("classes_unseen_class_refused", r.returncode != 0 and "iris-nova" in r.stderr and "3 classes" in r.stderr, r.stderr[-400:])

repo = os.path.join(d, "repo")
shutil.copytree(os.path.join(d, "m3"), os.path.join(repo, "iris", "1"))
srv = Server(repo)
try:
    recs = [{"x1": 0.1, "x2": 0.0}, {"x1": 3.1, "x2": 0.3}, {"x1": 6.0, "x2": -0.2}]
    st, h, body = srv.json("POST", "/v1/models/iris:predict", {"instances": recs, "outputs": ["label", "probability"]})
    labels = [p.get("label") for p in body.get("predictions", [])] if isinstance(body, dict) else None
    check("classes_predict_label_is_name", st == 200 and labels == [names[0], names[1], names[2]], (st, body))
    ok = st == 200 and all(len(p["probability"]) == 3 and want[p["probability"].index(max(p["probability"]))] == p["label"]
                           for p in body["predictions"])
    check("classes_probability_in_name_order", ok, body)
    st, h, meta = srv.json("GET", "/v2/models/iris")
    check("classes_metadata_lists_names", st == 200 and meta.get("predict", {}).get("class_names") == want, meta)
finally:
    srv.stop()
done()
