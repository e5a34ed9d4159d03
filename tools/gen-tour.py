#!/usr/bin/python3
"""The README's five-minute tour, run for real: every ```console block between
`<!-- tour:NAME -->` and the closing fence is the output of the commands it
shows, produced here in a fresh folder with the keel being built. `make docs`
rewrites README.md with them; `--check` regenerates into memory and fails
when the README differs in anything but what varies from run to run
(durations, rates, wall-clock dates, the doctor's machine facts), so the
printed numbers cannot go stale (tests/integration/docs_tour.sh).

Usage: tools/gen-tour.py KEEL [README [OUT]]   rewrite README (or write OUT)
       tools/gen-tour.py KEEL README --check       fail when README is stale
       tools/gen-tour.py --compare OLD NEW         compare two READMEs' tours
Needs: python3 with numpy and scikit-learn (the digits data), curl."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHOWN_DIR = "/tmp/tour"   # the folder the README shows (the real one is a temporary folder)


class Tour:
    def __init__(self, keel, work):
        self.keel = os.path.abspath(keel)
        self.work = work
        self.env = dict(os.environ, PATH=os.path.dirname(self.keel) + ":/usr/bin:" + os.environ.get("PATH", ""),
                        KEEL_LOG_FORMAT="text", LC_ALL="C", COLUMNS="200")
        for k in ("KEEL_THREADS", "KEEL_TRACKING", "KEEL_TRACKING_CEILING", "KEEL_MEMORY_LIMIT", "KEEL_LOG_LEVEL"):
            self.env.pop(k, None)
        # the experiment store is the tour folder's keel-runs/ (made by the train
        # block); the per-user default is never the user's own
        self.env["XDG_DATA_HOME"] = os.path.join(work, ".xdg-data")
        self.env["KEEL_THREADS"] = "2"   # the README's 2-core machine, whatever runs it

    def run(self, shown, cmd=None, keep=None, timeout=600):
        """Runs cmd (default: the shown command); returns '$ shown' + output lines, trimmed by keep(lines)."""
        r = subprocess.run(cmd or shown, shell=True, cwd=self.work, env=self.env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=timeout)
        if r.returncode != 0:
            raise SystemExit("gen-tour: '%s' exited %d:\n%s" % (shown, r.returncode, r.stdout[-3000:]))
        lines = r.stdout.rstrip("\n").split("\n") if r.stdout.strip() else []
        lines = [ln.replace(self.work, SHOWN_DIR) for ln in lines]
        if keep:
            lines = keep(lines)
        return ["$ " + shown] + lines


def head(n, note="(trimmed)"):
    def k(lines):
        if len(lines) <= n:
            return lines
        return lines[:n] + ["  ..." + " " * 60 + note]
    return k


def pick(*patterns, note=None, drop=()):
    """Keeps the lines matching any pattern; a run of left-out lines becomes
    one '...' line with the note (lines matching drop go silently)."""
    def k(lines):
        out, skipped = [], False
        for ln in lines:
            if any(re.search(p, ln) for p in drop):
                continue
            if any(re.search(p, ln) for p in patterns):
                if skipped and note:
                    out.append("..." + " " * 70 + note)
                out.append(ln)
                skipped = False
            else:
                skipped = True
        if skipped and note:
            out.append("..." + " " * 70 + note)
        return out
    return k


def strip_log_time(lines):
    """Log lines start with a UTC timestamp: the README shows them without it."""
    return [re.sub(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d+Z ", "", ln) for ln in lines]


def blocks(t):
    """Yields (name, lines) for every tour block, in README order. The files
    the README shows (tour-file blocks) are written to the folder first."""
    yield "doctor", t.run("keel doctor", keep=lambda ls: head_doctor(ls))
    yield "data", (t.run("keel data gen-clicks clicks.csv --rows 100000 --seed 7")
                   + t.run("keel schema infer clicks.csv --out clicks.yaml")
                   + t.run("keel ingest clicks.csv --schema clicks.yaml --out clicks")
                   + t.run("keel data stats clicks"))
    rec = '{"user_id": 515067, "item_price": 190.58, "ts": "2023-11-02T12:05:00Z", "category": "garden"}'
    yield "features", (t.run("keel features fit features.yaml --data clicks --out features.json")
                       + t.run("keel features apply features.json --data clicks --out clicks-features")
                       + t.run("keel features describe features.json")
                       + t.run("keel features materialize features.json --data clicks --store clicks.db")
                       + t.run("echo '%s' \\\n    | keel features transform features.json --store clicks.db" % rec,
                               "echo '%s' | keel features transform features.json --store clicks.db" % rec))
    shutil.copytree(os.path.join(SRC, "examples", "digits"), os.path.join(t.work, "examples", "digits"),
                    ignore=shutil.ignore_patterns("data", "out-*"))
    ev = "keel eval mlp --data examples/digits/data/x_test.npy,examples/digits/data/y_test.npy"
    yield "train", (t.run("mkdir keel-runs      # this folder's experiment store: keel finds it from here and below",
                          "mkdir keel-runs")
                    + t.run("python3 examples/digits/prepare.py examples/digits/data")
                    + t.run("keel train examples/digits/mlp.yaml --out mlp --set train.epochs=15 --quiet")
                    + t.run(ev, keep=pick(r"^(rows|loss|accuracy|class|macro|confusion) ", r"^ +[0-2] +[01]\.",
                                          r"^ {11}0", r"^ +0 +36 ", r"^ +9 ", note="(trimmed)")))
    t.run("x4", "python3 -c \"import numpy as np; np.save('x4.npy', np.load('examples/digits/data/x_test.npy')[:4])\"")
    yield "inference", (t.run("keel inspect mlp/model.onnx")
                        + t.run("keel run mlp/model.onnx --input input=x4.npy --output-dir out      # x4.npy: 4 rows of x_test.npy",
                                "keel run mlp/model.onnx --input input=x4.npy --output-dir out")
                        + t.run("keel bench mlp/model.onnx --batch 32 --iters 200"))
    yield "serving", serving(t)
    yield "tune", (t.run("keel tune examples/digits/mlp.yaml --space space.yaml --trials 6",
                         keep=pick(r"^trial 0:", r"^trial 1: started", r"^trial 5: val", r"^study", r"^best", r"^details",
                                   note="(trimmed)"))
                   + t.run("keel runs list", keep=lambda ls: ls[:3] + ["..." + " " * 70 + "(trimmed)"] + ls[-1:])
                   + t.run("keel tune register mlp-afec7e0d --name digits --alias tuned     # the best trial's model",
                           "keel tune register mlp-afec7e0d --name digits --alias tuned"))
    shutil.copytree(os.path.join(SRC, "examples", "clicks"), os.path.join(t.work, "examples", "clicks"),
                    ignore=shutil.ignore_patterns("data", "out-*"))
    os.makedirs(os.path.join(t.work, "examples", "clicks", "data"), exist_ok=True)
    pipe = "keel pipeline run examples/clicks/pipeline.yaml --out out"
    yield "pipeline", (t.run("keel data gen-clicks examples/clicks/data/clicks.csv --rows 200000 --seed 1")
                       + t.run(pipe, keep=pick(r"^keel pipeline", r"^\[[1-7]/8\] .* done ", r"^test AUC", r"^Bayes",
                                               r"^lineage", r"^report", note="(trimmed)",
                                               drop=(r" running\s*$", r"^$")))
                       + t.run(pipe + "     # again: nothing changed", pipe,
                               keep=pick(r"^\[1/8\]", r"^\[7/8\]", r"^== keel", note=""))
                       + predicting(t))


def start_server(t, ref):
    """keel serve REF on a free port: (process, port, log lines up to 'listening')."""
    p = subprocess.Popen([t.keel, "serve", ref, "--port", "0"], cwd=t.work, env=t.env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log, port, deadline = [], None, time.time() + 60
    while time.time() < deadline and port is None:
        ln = p.stdout.readline()
        if not ln:
            break
        log.append(ln.rstrip("\n"))
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", ln)
        if m:
            port = m.group(1)
    if port is None:
        p.kill()
        raise SystemExit("gen-tour: keel serve %s did not start:\n%s" % (ref, "\n".join(log)))
    return p, port, [ln.replace(":" + port, ":8000") for ln in strip_log_time(log)]


def stop_server(p):
    p.send_signal(signal.SIGTERM)
    rest, _ = p.communicate(timeout=60)
    return strip_log_time([ln for ln in rest.rstrip("\n").split("\n") if "[serve]" in ln and "request" not in ln])


def predicting(t):
    p, port, _ = start_server(t, "ctr@champion")
    try:
        rec = '{"instances": [{"user_id": 42, "item_price": 19.99, "ts": "2023-11-03T20:15:00Z", "category": "beauty"}]}'
        out = ["$ keel serve ctr@champion &"]
        out += t.run("curl -s localhost:8000/v1/models/ctr:predict \\\n    -d '%s'" % rec,
                     "curl -s localhost:%s/v1/models/ctr:predict -d '%s'; echo" % (port, rec))
        stop_server(p)
        return out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def head_doctor(lines):
    keep, out = {"kernel.swappiness", "kernel.thp", "net.somaxconn", "limits.nofile", "memory.total", "cpu.simd"}, []
    it = iter(lines)
    for ln in it:
        if ln.startswith("  STATUS") or any(ln.split()[1:2] == [k] for k in keep if ln.strip()):
            out.append(ln)
        elif ln.startswith("Checks that did not pass"):
            out.append("  ..." + " " * 78 + "(trimmed)")
            out.append(ln)
            break
    rest = list(it)
    first = next((i for i, ln in enumerate(rest) if ln.startswith("  WARN") or ln.startswith("  FAIL")), None)
    if first is not None:
        out.append("")
        block = [rest[first]]
        for ln in rest[first + 1:]:
            if not ln.startswith("    "):
                break
            block.append(ln)
        out += block + ["  ..."]
    out += [ln for ln in rest if re.match(r"^\d+ checks:", ln)]
    return out


def serving(t):
    out = t.run("keel models register mlp --name digits --alias prod") + t.run("keel models list")
    p, port, shown = start_server(t, "digits@prod")
    try:
        return out + serving_requests(t, p, port, shown)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def serving_requests(t, p, port, shown):
    out = []
    out += ["$ keel serve digits@prod &"] + shown
    import numpy as np
    x = np.load(os.path.join(t.work, "examples", "digits", "data", "x_test.npy"))[0]
    data = ", ".join("%.9g" % v for v in x)
    shown_data = ", ".join("%.9g" % v for v in x[:4]) + ", ..."
    body = '{"inputs":[{"name":"input","shape":[1,64],"datatype":"FP32","data":[%s]}]}'
    u = "localhost:%s" % port
    out += t.run("curl -s localhost:8000/v2/health/ready", "curl -s %s/v2/health/ready; echo" % u)
    out += t.run("curl -s localhost:8000/v2/models/digits/infer \\\n    -d '%s'   # 64 values" % (body % shown_data),
                 "curl -s %s/v2/models/digits/infer -d '%s'; echo" % (u, body % data), keep=wrap_infer)
    out += t.run("curl -s localhost:8000/metrics | grep 'requests_total{.*success'",
                 "curl -s %s/metrics | grep 'requests_total{.*success'" % u)
    out.append("$ kill %1")
    return out + stop_server(p)


def wrap_infer(lines):
    """The JSON answer on two lines, as the README shows it."""
    s = lines[0]
    i = s.find('"data":')
    return [s[:i], " " + s[i:]] if i > 0 else lines


# ---- README surgery ----------------------------------------------------------

BLOCK = re.compile(r"(<!-- tour:(\w+) -->\n```console\n)(.*?)(```\n)", re.S)
FILE = re.compile(r"<!-- tour-file:([\w.]+) -->\n```\w*\n(.*?)```\n", re.S)


def write_inputs(readme, work):
    for m in FILE.finditer(readme):
        with open(os.path.join(work, m.group(1)), "w") as f:
            f.write(m.group(2))


def render(readme, made):
    """The README with every tour block replaced by what was made; a block
    that differs only in what varies between runs keeps its text (no churn)."""
    def sub(m):
        name = m.group(2)
        if name not in made:
            raise SystemExit("gen-tour: README block tour:%s has no generator" % name)
        new = m.group(1) + "\n".join(made[name]) + "\n" + m.group(4)
        return m.group(0) if name != "doctor" and comparable(m.group(0)) == comparable(new) else new
    text, n = BLOCK.subn(sub, readme)
    if n != len(made):
        raise SystemExit("gen-tour: %d tour blocks in the README, %d generated" % (n, len(made)))
    return text


VOLATILE = [
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|s|µs|us|min)\b"), "<time>"),          # durations
    (re.compile(r"\b\d+(\.\d+)? (samples/s|req/s|MB/s)"), "<rate>"),         # rates
    (re.compile(r"\b20[2-9]\d-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?Z?"), "<now>"),  # wall-clock times (the data is from 2023)
    (re.compile(r"(ns/row.*|^\S+\s+\d+\s+\w+\s+\S+\s+\w+\s+\d+\s+)\d+(\.\d+)?"), r"\1<cost>"),  # features describe cost
    (re.compile(r"(latency|throughput|memory|load)\s.*"), r"\1 <measured>"),  # keel bench lines
    (re.compile(r"(peak|arena) \d+(\.\d+)? [KMG]?i?B"), r"\1 <bytes>"),
]


def comparable(text):
    """The README with what varies between runs masked, and the doctor block (machine facts) left out."""
    out = []
    for m in BLOCK.finditer(text):
        if m.group(2) == "doctor":
            continue
        body = m.group(3)
        for rx, rep in VOLATILE:
            body = "\n".join(rx.sub(rep, ln) for ln in body.split("\n"))
        body = "\n".join(" ".join(ln.split()) for ln in body.split("\n"))   # column widths follow the values
        out.append("tour:%s\n%s" % (m.group(2), body))
    return "\n".join(out)


NUMBER = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?")
# float outputs (a trained model's scores) differ in the last digits between
# CPU types (BLAS kernels sum in another order); a stale number differs more
REL_TOL = 1e-5


def close_lines(x, y):
    """Two lines that differ only in floats within REL_TOL of each other."""
    if NUMBER.sub("#", x) != NUMBER.sub("#", y):
        return False
    for u, v in zip(NUMBER.findall(x), NUMBER.findall(y)):
        fu, fv = float(u), float(v)
        if abs(fu - fv) > REL_TOL * max(abs(fu), abs(fv), 1e-3):
            return False
    return True


def differences(old, new):
    """The unified diff of two READMEs' tours, with what varies masked (empty: the same)."""
    import difflib
    a, b = comparable(old).split("\n"), comparable(new).split("\n")
    if len(a) == len(b):
        b = [x if x != y and close_lines(x, y) else y for x, y in zip(a, b)]
    return [] if a == b else list(difflib.unified_diff(a, b, "README.md", "regenerated", lineterm="", n=1))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--compare" in sys.argv:   # --compare OLD NEW: no run, only the comparison
        diff = differences(open(args[0]).read(), open(args[1]).read())
        if diff:
            sys.stderr.write("gen-tour: the README tour is stale (run make docs):\n" + "\n".join(diff[:60]) + "\n")
            sys.exit(1)
        return
    check = "--check" in sys.argv
    keel = args[0] if args else os.path.join(SRC, "build", "keel")
    readme_path = args[1] if len(args) > 1 else os.path.join(SRC, "README.md")
    out_path = args[2] if len(args) > 2 else readme_path
    readme = open(readme_path).read()
    work = tempfile.mkdtemp(prefix="keel-tour-")
    try:
        write_inputs(readme, work)
        made = dict(blocks(Tour(keel, work)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    new = render(readme, made)
    if check:
        diff = differences(readme, new)
        if diff:
            sys.stderr.write("gen-tour: the README tour is stale (run make docs):\n" + "\n".join(diff[:60]) + "\n")
            sys.exit(1)
        return
    old = open(out_path).read() if os.path.exists(out_path) else None
    if new != old:
        tmp = out_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(new)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out_path)


if __name__ == "__main__":
    main()
