# keel ui in headless Chromium: start on port 0, load the runs table (with
# filter and sort), a run page, the compare view and the models pages;
# check elements and that charts render as SVG with paths; save screenshots
# under build/; stop with SIGTERM (exit 0); then a given port and SIGINT.
import os, re, shutil, signal, socket, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylib"))
import report as rep  # noqa: E402
from report import report as ok  # noqa: E402
from ui_browser import Ui, chromium  # noqa: E402

KEEL = os.environ["KEEL"]
T = tempfile.mkdtemp(dir=os.environ.get("KEEL_TEST_TMP"))
BUILD = os.path.join(os.environ["KEEL_SRC"], os.environ.get("BUILD", "build"))
# track_pg.sh runs it again with KEEL_TEST_TRACKING, a PostgreSQL URL
env = dict(os.environ, KEEL_TRACKING=os.environ.get("KEEL_TEST_TRACKING") or os.path.join(T, "store"))


def keel(*args):
    return subprocess.run([KEEL] + list(args), env=env, capture_output=True, text=True, timeout=60)


if not chromium():
    print("FAIL track_ui_chromium: chromium is not installed (make deps installs it)")
    sys.exit(1)

open(os.path.join(T, "notes.txt"), "w").write("artifact bytes")
keel("runs", "simulate", "--experiment", "ui", "--name", "alpha", "--steps", "60", "--param", "lr=0.001", "--tag", "team=ads",
     "--artifact", os.path.join(T, "notes.txt"))
keel("runs", "simulate", "--experiment", "ui", "--name", "beta", "--steps", "90", "--param", "lr=0.01", "--tag", "team=search")
mdir = os.path.join(T, "model")
os.makedirs(mdir)
open(os.path.join(mdir, "model.onnx"), "w").write("w")
r = keel("models", "register", mdir, "--name", "clf", "--alias", "champion")
ok("track_ui_setup", r.returncode == 0, r.stderr)

ui = Ui(KEEL, env, T, args=["--host", "127.0.0.1"])
ok("track_ui_prints_url", ui.base is not None, ui.line)
if not ui.base:
    ui.stop()
    sys.exit(1)
try:
    d = ui.dom("runs")
    ok("track_ui_runs_table", '<table id="runs"' in d and d.count('class="run"') == 2, d[:300])
    ok("track_ui_runs_filter_form", 'id="filter"' in d and 'id="compare"' in d)
    ok("track_ui_runs_sort_links", d.count('class="sort"') >= 6)
    # (plain HTTP for the variants; Chromium for the pages that render charts)
    code, d = ui.fetch("runs?filter=params.lr+%3D+%220.01%22&sort=-metrics.acc")
    ok("track_ui_runs_filtered", code == 200 and d.count('class="run"') == 1 and ">beta<" in d)
    code, d = ui.fetch("runs?filter=metrics.acc+%3E%3E+1")
    ok("track_ui_filter_error_column", 'id="filter-error"' in d and "column 14" in d, code)
    d = ui.dom("run/1")
    ok("track_ui_run_page", 'class="params"' in d and "0.001" in d and 'id="artifacts"' in d and "notes.txt" in d)
    ok("track_ui_run_charts", d.count("<svg") >= 2 and len(re.findall(r'<path class="series"[^>]* d="M[0-9.]+ [0-9.]+ L', d)) >= 2,
       "no chart paths")
    d = ui.dom("compare?ids=1&ids=2")
    ok("track_ui_compare_table", 'id="compare-table"' in d and 'class="diff"' in d)
    ok("track_ui_compare_overlay", len(re.findall(r'<path class="series"', d)) >= 4)
    code, d = ui.fetch("models")
    ok("track_ui_models", code == 200 and 'id="models"' in d and ">clf<" in d and "champion" in d)
    d = ui.dom("models/clf")
    ok("track_ui_model_page", 'id="versions"' in d and 'class="alias"' in d and 'id="alias-history"' in d)
    os.makedirs(BUILD, exist_ok=True)
    for name, path in (("ui-runs.png", "runs"), ("ui-compare.png", "compare?ids=1,2")):
        out = os.path.join(BUILD, name)
        ok("track_ui_screenshot_" + name.split(".")[0], ui.screenshot(path, out, "1280,800"), out)
finally:
    rc = ui.stop()
ok("track_ui_sigterm_exit_0", rc == 0, "exit %s" % rc)

# a given port, then SIGINT
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
port = sock.getsockname()[1]
sock.close()
ui = Ui(KEEL, env, T, port=port)
ok("track_ui_given_port", ("127.0.0.1:%d/" % port) in ui.line, ui.line)
try:
    ok("track_ui_healthz", ui.base is not None and ui.fetch("healthz")[1].strip() == "ok")
finally:
    rc = ui.stop(signal.SIGINT)
ok("track_ui_sigint_exit_0", rc == 0, "exit %s" % rc)
shutil.rmtree(T, ignore_errors=True)
sys.exit(1 if rep.failed else 0)
