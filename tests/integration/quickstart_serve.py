"""make quickstart with the server (test size): the script runs the click-log
pipeline, starts keel serve on 127.0.0.1 and prints two curl commands; this
test runs exactly those printed commands (the :predict with a raw record and
the v2 infer on its feature vector), checks both answer the same logit for
the new model, then sends Ctrl-C (SIGINT) and checks the server stops
cleanly."""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import KEEL, check, done, tmpdir  # noqa: E402

src = os.environ.get("KEEL_SRC", ".")
d = tmpdir("quickstart-")
env = dict(os.environ, KEEL_QUICKSTART_ROWS="20000", KEEL_QUICKSTART_PORT="0", KEEL_QUICKSTART_DIR=d)
log = open(os.path.join(d, "qs.log"), "w+")
p = subprocess.Popen(["bash", os.path.join(src, "tools", "quickstart.sh"), os.path.dirname(KEEL)], stdout=log,
                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
ready = False
deadline = time.time() + 240
while time.time() < deadline and p.poll() is None:
    with open(log.name) as f:
        if "Ctrl-C stops the server" in f.read():
            ready = True
            break
    time.sleep(0.5)
text = open(log.name).read()
if not check("quickstart_serve_ready", ready, text[-1500:]):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    done()
lines = [ln for ln in text.splitlines() if ln.startswith("curl ")]
check("quickstart_prints_two_curls", len(lines) == 2 and ":predict" in lines[0] and "/infer" in lines[1], lines)
answers = []
for ln in lines:
    r = subprocess.run(["bash", "-c", ln], capture_output=True, text=True, timeout=60)
    try:
        answers.append(json.loads(r.stdout))
    except ValueError:
        answers.append({"error": r.stdout + r.stderr})
ok = len(answers) == 2 and "predictions" in answers[0] and "outputs" in answers[1]
check("quickstart_curl_predict_answers", ok and len(answers[0]["predictions"]) == 1, answers[:1])
check("quickstart_curl_infer_answers", ok and answers[1]["outputs"][0]["shape"] == [1, 1], answers[1:])
if ok:
    a, b = answers[0]["predictions"][0], answers[1]["outputs"][0]["data"][0]
    a = a[0] if isinstance(a, list) else a
    check("quickstart_predict_equals_infer", abs(a - b) <= 1e-6 * max(1.0, abs(b)), (a, b))
    fh = json.load(open(os.path.join(d, "out", "features", "features.json")))["feature_hash"]
    check("quickstart_predict_feature_hash", answers[0].get("feature_hash") == fh, answers[0].get("feature_hash"))
os.killpg(p.pid, signal.SIGINT)   # what Ctrl-C in the terminal sends to the foreground group
try:
    rc = p.wait(timeout=60)
except subprocess.TimeoutExpired:
    os.killpg(p.pid, signal.SIGKILL)
    rc = -1
text = open(log.name).read()
check("quickstart_ctrl_c_stops_cleanly", rc == 0 and "keel serve stopped" in text, (rc, text[-600:]))
done()
