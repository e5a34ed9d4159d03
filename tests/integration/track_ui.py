# keel ui in headless Chromium: start on port 0, load the runs table (with
# filter and sort), a run page, the compare view and the models pages;
# check elements and that charts render as SVG with paths; save screenshots
# under build/; stop with SIGTERM (exit 0).
import os, re, shutil, signal, subprocess, sys, tempfile, time

KEEL = os.environ["KEEL"]
T = tempfile.mkdtemp(dir=os.environ.get("KEEL_TEST_TMP"))
BUILD = os.path.join(os.environ["KEEL_SRC"], os.environ.get("BUILD", "build"))
env = dict(os.environ, KEEL_TRACKING=os.path.join(T, "store"))
failed = False


def ok(name, cond, why=""):
    global failed
    if cond:
        print("PASS " + name)
    else:
        failed = True
        print("FAIL %s: %s" % (name, why))


def keel(*args):
    return subprocess.run([KEEL] + list(args), env=env, capture_output=True, text=True, timeout=60)


chromium = shutil.which("chromium") or shutil.which("chromium-browser")
if not chromium:
    print("FAIL track_ui_chromium: chromium is not installed (make deps installs it)")
    sys.exit(1)

keel("runs", "simulate", "--experiment", "ui", "--name", "alpha", "--steps", "60", "--param", "lr=0.001", "--tag", "team=ads")
keel("runs", "simulate", "--experiment", "ui", "--name", "beta", "--steps", "90", "--param", "lr=0.01", "--tag", "team=search")
mdir = os.path.join(T, "model")
os.makedirs(mdir)
open(os.path.join(mdir, "model.onnx"), "w").write("w")
r = keel("models", "register", mdir, "--name", "clf", "--alias", "champion")
ok("track_ui_setup", r.returncode == 0, r.stderr)

ui = subprocess.Popen([KEEL, "ui", "--port", "0", "--host", "127.0.0.1"], env=env, stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE, text=True)
line = ui.stdout.readline()
m = re.search(r"(http://127\.0\.0\.1:(\d+)/)", line)
ok("track_ui_prints_url", m is not None, line)
if not m:
    ui.kill()
    sys.exit(1)
base = m.group(1)


def chrome(*extra, url):
    prof = tempfile.mkdtemp(dir=T)
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir=" + prof] + list(extra) + [url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90)


def fetch(path):
    import urllib.request
    with urllib.request.urlopen(base + path, timeout=30) as resp:
        return resp.read().decode()


def fetch_err(path):
    import urllib.error
    try:
        return fetch(path)
    except urllib.error.HTTPError as e:
        return e.read().decode()


def dom(path):
    r = chrome("--dump-dom", url=base + path)
    return r.stdout


try:
    d = dom("runs")
    ok("track_ui_runs_table", '<table id="runs"' in d and d.count('class="run"') == 2, d[:300])
    ok("track_ui_runs_filter_form", 'id="filter"' in d and 'id="compare"' in d)
    ok("track_ui_runs_sort_links", d.count('class="sort"') >= 6)
    # (plain HTTP for the variants; Chromium for the pages that render charts)
    d = fetch("runs?filter=params.lr+%3D+%220.01%22&sort=-metrics.acc")
    ok("track_ui_runs_filtered", d.count('class="run"') == 1 and ">beta<" in d)
    d = fetch_err("runs?filter=metrics.acc+%3E%3E+1")
    ok("track_ui_filter_error_column", 'id="filter-error"' in d and "column 14" in d)
    d = dom("run/1")
    ok("track_ui_run_page", 'class="params"' in d and "0.001" in d and 'id="artifacts"' in d)
    ok("track_ui_run_charts", d.count("<svg") >= 2 and len(re.findall(r'<path class="series"[^>]* d="M[0-9.]+ [0-9.]+ L', d)) >= 2,
       "no chart paths")
    d = dom("compare?ids=1&ids=2")
    ok("track_ui_compare_table", 'id="compare-table"' in d and 'class="diff"' in d)
    ok("track_ui_compare_overlay", len(re.findall(r'<path class="series"', d)) >= 4)
    d = fetch("models")
    ok("track_ui_models", 'id="models"' in d and ">clf<" in d and "champion" in d)
    d = dom("models/clf")
    ok("track_ui_model_page", 'id="versions"' in d and 'class="alias"' in d and 'id="alias-history"' in d)
    os.makedirs(BUILD, exist_ok=True)
    for name, path in (("ui-runs.png", "runs"), ("ui-compare.png", "compare?ids=1,2")):
        out = os.path.join(BUILD, name)
        if os.path.exists(out):
            os.remove(out)
        chrome("--screenshot=" + out, "--window-size=1280,800", url=base + path)
        ok("track_ui_screenshot_" + name.split(".")[0], os.path.exists(out) and os.path.getsize(out) > 5000, out)
finally:
    ui.send_signal(signal.SIGTERM)
    try:
        rc = ui.wait(timeout=10)
    except subprocess.TimeoutExpired:
        ui.kill()
        rc = -1
ok("track_ui_sigterm_exit_0", rc == 0, "exit %s" % rc)
# a given port, then SIGINT
import socket
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
port = sock.getsockname()[1]
sock.close()
ui = subprocess.Popen([KEEL, "ui", "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
line = ui.stdout.readline()
ok("track_ui_given_port", ("127.0.0.1:%d/" % port) in line, line)
base = "http://127.0.0.1:%d/" % port
try:
    ok("track_ui_healthz", fetch("healthz").strip() == "ok")
finally:
    ui.send_signal(signal.SIGINT)
    try:
        rc = ui.wait(timeout=10)
    except subprocess.TimeoutExpired:
        ui.kill()
        rc = -1
ok("track_ui_sigint_exit_0", rc == 0, "exit %s" % rc)
shutil.rmtree(T, ignore_errors=True)
sys.exit(1 if failed else 0)
