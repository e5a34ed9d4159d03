# Studies in keel ui (headless Chromium): a small keel tune study on the
# digits MLP (ASHA pruning), then /studies lists it with its counts and best
# value (plain HTTP), and /study/NAME (rendered by Chromium) shows the best
# trial, the trials table, the importance table and the two pictures (optimisation history with chart
# paths, parallel coordinates with one polyline per complete trial) that
# `keel tune show` draws; an unknown study is a 404. Screenshot under build/.
import json, os, re, shutil, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylib"))
import report as rep  # noqa: E402
from report import report as ok  # noqa: E402
from ui_browser import Ui, chromium  # noqa: E402

KEEL = os.environ["KEEL"]
SRC = os.environ["KEEL_SRC"]
T = tempfile.mkdtemp(dir=os.environ.get("KEEL_TEST_TMP"))
BUILD = os.path.join(SRC, os.environ.get("BUILD", "build"))
env = dict(os.environ, KEEL_TRACKING=os.path.join(T, "store"))
if not chromium():
    print("FAIL tune_ui_chromium: chromium is not installed (make deps installs it)")
    sys.exit(1)

# the digits data and the benchmark's spec (bench/tune/digits_spec.yaml), 3 epochs
r = subprocess.run([os.environ.get("PYTHON", "/usr/bin/python3"), os.path.join(SRC, "examples/digits/prepare.py"),
                    os.path.join(T, "data")], capture_output=True, text=True)
ok("tune_ui_prepare_data", r.returncode == 0, r.stderr)
spec = open(os.path.join(SRC, "bench/tune/digits_spec.yaml")).read()
ok("tune_ui_spec", "epochs: 20" in spec, "bench/tune/digits_spec.yaml has no 'epochs: 20'")
open(os.path.join(T, "spec.yaml"), "w").write(spec.replace("epochs: 20", "epochs: 3"))
open(os.path.join(T, "space.yaml"), "w").write("""optimizer.lr: {type: float, low: 0.0003, high: 0.03, log: true}
layers.0.out: {type: int, low: 16, high: 64, step: 16}
optimizer.type: {type: categorical, choices: [adamw, sgd]}
""")
r = subprocess.run([KEEL, "tune", "spec.yaml", "--space", "space.yaml", "--trials", "6", "--pruner", "asha", "--study", "uistudy",
                    "--json"], cwd=T, env=env, capture_output=True, text=True, timeout=300)
ok("tune_ui_study_runs", r.returncode == 0, r.stderr)
summary = json.loads(r.stdout) if r.returncode == 0 else {}

ui = Ui(KEEL, env, T)
ok("tune_ui_prints_url", ui.base is not None)
if not ui.base:
    sys.exit(1)
try:
    d = ui.fetch("studies")[1]
    ok("tune_ui_studies_table", '<table id="studies"' in d and d.count('class="study"') == 1 and 'href="/study/uistudy"' in d, d[:400])
    row = re.search(r'<tr class="study">(.*?)</tr>', d, re.S)
    cells = re.findall(r"<td>(.*?)</td>", row.group(1)) if row else []
    ok("tune_ui_studies_counts", len(cells) >= 9 and cells[4] == "6" and cells[6] == str(summary.get("pruned"))
       and abs(float(cells[8]) - summary.get("best", {}).get("value", -1)) < 1e-5, cells)
    d = ui.dom("study/uistudy")
    ok("tune_ui_study_best", 'id="best"' in d and ">%d</a>" % summary.get("best", {}).get("number", -1) in d, d[:400])
    rows = re.findall(r'<tr class="trial', d)
    ok("tune_ui_study_trials_table", len(rows) == 6 and d.count('class="trial best"') == 1 and "<th>optimizer.type</th>" in d
       and ('class="state-pruned"' in d) == (summary.get("pruned", 0) > 0), "%d rows" % len(rows))
    ok("tune_ui_study_importance", 'id="importance"' in d)
    svgs = re.findall(r"<svg.*?</svg>", d, re.S)
    ok("tune_ui_study_history_svg", any("optimisation history" in x and re.search(r'<path class="series"[^>]* d="M[0-9.]+ [0-9.]+', x)
                                        for x in svgs), "no history chart")
    par = [x for x in svgs if "parallel coordinates" in x]
    ok("tune_ui_study_parallel_svg", len(par) == 1 and par[0].count("<polyline") == summary.get("complete") and ">sgd<" in par[0],
       par[0][:300] if par else "no parallel coordinates")
    # the same pictures as keel tune show writes
    r = subprocess.run([KEEL, "tune", "show", "uistudy", "--out", os.path.join(T, "pics")], env=env, capture_output=True, text=True)
    raw = re.findall(r"<svg.*?</svg>", ui.fetch("study/uistudy")[1], re.S)
    same = [open(os.path.join(T, "pics", f)).read().strip() for f in ("history.svg", "parallel.svg")] == [x.strip() for x in raw]
    ok("tune_ui_same_svg_as_tune_show", r.returncode == 0 and same, r.stderr)
    code = ui.fetch("study/nosuch")[0]
    ok("tune_ui_unknown_study_404", code == 404, code)
    os.makedirs(BUILD, exist_ok=True)
    out = os.path.join(BUILD, "ui-study.png")
    ok("tune_ui_screenshot", ui.screenshot("study/uistudy", out), out)
finally:
    rc = ui.stop()
ok("tune_ui_sigterm_exit_0", rc == 0, "exit %s" % rc)
shutil.rmtree(T, ignore_errors=True)
sys.exit(1 if rep.failed else 0)
