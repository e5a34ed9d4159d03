"""The deployment files in deploy/ against the real keel: the systemd unit
passes `systemd-analyze verify` and its ExecStart command line starts a real
`keel serve` that drains and exits 0 on SIGTERM within TimeoutStopSec; the
sysctl.d and tmpfiles.d files set what `keel doctor` recommends (doctor run
on a fake /proc + /sys holding those values passes them); the Kubernetes
manifest parses, its probes, ports and scrape annotations name keel serve's
real endpoints, and its container args start a server that answers them."""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import KEEL, Server, check, done, tmpdir, write_meta, write_mlp  # noqa: E402

SRC = os.environ.get("KEEL_SRC", ".")
D = os.path.join(SRC, "deploy")
T = tmpdir("deploy-")

repo = tmpdir("deploy-repo-")
write_mlp(os.path.join(repo, "mlp", "1", "model.onnx"), sizes=(8, 16, 4))
write_meta(os.path.join(repo, "mlp", "1"))


def serve_args(argv):
    """keel serve arguments of a deployment, runnable here: the repository
    becomes the test repository, the port 0 (Server adds it), the host loopback."""
    assert argv[0] == "serve", argv
    out, i = [], 2
    while i < len(argv):
        a = argv[i]
        if a in ("--port", "-p"):
            i += 2
            continue
        if a == "--host":
            out += ["--host", "127.0.0.1"]
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def try_server(name, argv, stop_limit):
    """Starts keel serve with a deployment's arguments, checks the health
    endpoints, then SIGTERM: exit 0 within stop_limit seconds."""
    try:
        s = Server(repo, *serve_args(argv))
    except RuntimeError as ex:
        check(name + "_starts", False, ex)
        return None
    check(name + "_starts", True)
    st_live = s.req("GET", "/v2/health/live")[0]
    ready = 0
    for _ in range(50):
        ready = s.req("GET", "/v2/health/ready")[0]
        if ready == 200:
            break
        time.sleep(0.1)
    st, h, body = s.req("GET", "/metrics")
    check(name + "_endpoints", st_live == 200 and ready == 200 and st == 200 and b"# TYPE" in body,
          "live %d ready %d metrics %d" % (st_live, ready, st))
    t0 = time.time()
    s.signal(signal.SIGTERM)
    try:
        rc = s.p.wait(stop_limit)
    except subprocess.TimeoutExpired:
        rc = "still running after %ss" % stop_limit
    check(name + "_sigterm_drains_exit_0", rc == 0, "exit %s after %.1fs" % (rc, time.time() - t0))
    s.stop()
    return s


# ---------------------------------------------------------------- systemd
unit_path = os.path.join(D, "systemd", "keel-serve.service")
unit = open(unit_path).read()
# ExecStart with its continuation lines
m = re.search(r"^ExecStart=((?:.*\\\n)*.*)$", unit, re.M)
exec_start = shlex.split(m.group(1).replace("\\\n", " ")) if m else []
kv = {}
for line in unit.splitlines():
    if "=" in line and not line.startswith("#") and not line.startswith("ExecStart"):
        k, v = line.split("=", 1)
        kv.setdefault(k.strip(), v.strip())
sa = shutil.which("systemd-analyze")
if not sa:
    check("deploy_systemd_verify", False, "systemd-analyze not found (package systemd; make deps installs it)")
else:
    # verify a copy whose ExecStart names the keel under test (verify checks the binary exists)
    os.makedirs(os.path.join(T, "unit"), exist_ok=True)
    copy = os.path.join(T, "unit", "keel-serve.service")
    with open(copy, "w") as f:
        f.write(unit.replace("ExecStart=" + exec_start[0], "ExecStart=" + os.path.abspath(KEEL)))
    r = subprocess.run([sa, "verify", copy], capture_output=True, text=True)
    # unknown keys and bad values are only warnings (exit 0): any output fails
    noise = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    check("deploy_systemd_verify", r.returncode == 0 and not noise, "exit %d: %s" % (r.returncode, noise[:5]))
check("deploy_systemd_execstart", len(exec_start) > 2 and exec_start[0].endswith("/keel") and exec_start[1] == "serve",
      exec_start)
exit_timeout = float(exec_start[exec_start.index("--exit-timeout") + 1]) if "--exit-timeout" in exec_start else 30
check("deploy_systemd_stop_settings",
      kv.get("KillSignal") == "SIGTERM" and float(kv.get("TimeoutStopSec", "0")) > exit_timeout
      and "-HUP" in kv.get("ExecReload", "") and kv.get("Restart") in ("on-failure", "always"),
      "KillSignal %s TimeoutStopSec %s (> --exit-timeout %s) ExecReload %s Restart %s" % (
          kv.get("KillSignal"), kv.get("TimeoutStopSec"), exit_timeout, kv.get("ExecReload"), kv.get("Restart")))
try_server("deploy_systemd_execstart", exec_start[1:], float(kv.get("TimeoutStopSec", "40")))



# SystemCallFilter: every system call a real keel serve makes (under strace:
# start, health, inference, metrics, SIGHUP rescan, SIGTERM drain) is allowed
# by the unit's filter lines, read in systemd's order (the first line sets the
# kind, later ~lines remove and plain lines add back)
def expand(group, seen=None):
    seen = seen if seen is not None else set()
    out = set()
    if group in seen:
        return out
    seen.add(group)
    r = subprocess.run([sa, "syscall-filter", group], capture_output=True, text=True)
    for line in r.stdout.splitlines()[1:]:
        w = line.strip()
        if not w or w.startswith("#"):
            continue
        out |= expand(w, seen) if w.startswith("@") else {w}
    return out


def names(words):
    out = set()
    for w in words:
        out |= expand(w) if w.startswith("@") else {w}
    return out


filters = [l.split("=", 1)[1].split("#")[0].strip() for l in unit.splitlines() if l.startswith("SystemCallFilter=")]
strace = shutil.which("strace")
if not sa or not strace:
    check("deploy_systemd_syscall_filter", False, "needs systemd-analyze and strace (make deps installs them)")
elif not filters:
    check("deploy_systemd_syscall_filter", False, "the unit has no SystemCallFilter")
else:
    allowed = None
    for f in filters:
        deny = f.startswith("~")
        ws = names(f.lstrip("~").split())
        if allowed is None:
            allowed = ws if not deny else None
            if deny:  # a deny list first: everything else allowed; not what the unit does
                break
        elif deny:
            allowed -= ws
        else:
            allowed |= ws
    summ = os.path.join(T, "strace.txt")
    # LeakSanitizer cannot run under ptrace (a sanitizer build would exit 1): no leak check here
    asan = ":".join(x for x in (os.environ.get("ASAN_OPTIONS", ""), "detect_leaks=0") if x)
    errf = open(os.path.join(T, "strace-serve.err"), "w")
    p = subprocess.Popen([strace, "-f", "-qq", "-c", "-o", summ, KEEL, "serve", repo, "--port", "0"] +
                         serve_args(exec_start[1:]), stdout=subprocess.PIPE, stderr=errf,
                         env=dict(os.environ, KEEL_LOG_FORMAT="json", ASAN_OPTIONS=asan))
    line = p.stdout.readline().decode()
    try:
        port = int(line.strip().rsplit(":", 1)[1])
        import http.client
        body = json.dumps({"inputs": [{"name": "x", "shape": [2, 8], "datatype": "FP32", "data": [0.5] * 16}]})
        sts = []
        for method, path, b in (("GET", "/v2/health/ready", None), ("POST", "/v2/models/mlp/infer", body),
                                ("GET", "/metrics", None)):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request(method, path, body=b)
            sts.append(c.getresponse().status)
            c.close()
        child = int(open("/proc/%d/task/%d/children" % (p.pid, p.pid)).read().split()[0])
        os.kill(child, signal.SIGHUP)
        time.sleep(0.3)
        os.kill(child, signal.SIGTERM)
        rc = p.wait(40)
    except Exception as ex:  # noqa: BLE001
        p.kill()
        p.wait()
        sts, rc = [repr(ex), line], -1
    used = set()
    for l in open(summ) if os.path.exists(summ) else []:
        w = l.split()
        if w and not l.startswith(("%", "-")) and w[-1] != "total":
            used.add(w[-1])
    bad = sorted(used - (allowed or set()))
    check("deploy_systemd_syscall_filter", allowed is not None and rc == 0 and sts == [200, 200, 200] and len(used) > 20
          and not bad, "statuses %s, exit %s, %d syscalls used; not allowed by the unit: %s; stderr: %s" % (
              sts, rc, len(used), bad, open(errf.name).read()[-300:]))

# doctor's recommendations: a fake /proc + /sys with the values of the shipped files
doc = json.loads(subprocess.run([KEEL, "doctor", "--json"], capture_output=True, text=True).stdout or "{}")
rec = {c["id"]: c for c in doc.get("checks", [])}
mnof = re.search(r">= (\d+)", rec.get("limits.nofile", {}).get("recommended", ""))
check("deploy_systemd_nofile", mnof and int(kv.get("LimitNOFILE", "0")) >= int(mnof.group(1)),
      "LimitNOFILE %s, doctor recommends %s" % (kv.get("LimitNOFILE"), rec.get("limits.nofile", {}).get("recommended")))
sysctl_files = {"vm.swappiness": "proc/sys/vm/swappiness", "vm.overcommit_memory": "proc/sys/vm/overcommit_memory",
                "net.core.somaxconn": "proc/sys/net/core/somaxconn",
                "net.ipv4.tcp_max_syn_backlog": "proc/sys/net/ipv4/tcp_max_syn_backlog"}
R = os.path.join(T, "root")
seen = set()
for line in open(os.path.join(D, "systemd", "90-keel.conf")):
    line = line.split("#")[0].strip()
    if not line:
        continue
    k, v = [x.strip() for x in line.split("=", 1)]
    if k in sysctl_files:
        p = os.path.join(R, sysctl_files[k])
        os.makedirs(os.path.dirname(p), exist_ok=True)
        open(p, "w").write(v + "\n")
        seen.add(k)
tmpf = open(os.path.join(D, "systemd", "keel-tuning.conf")).read()
thp = re.search(r"^w\S* /sys/kernel/mm/transparent_hugepage/enabled .* (\S+)$", tmpf, re.M)
gov = re.search(r"^w\S* /sys/devices/system/cpu/cpu\*/cpufreq/scaling_governor .* (\S+)$", tmpf, re.M)
if thp:
    p = os.path.join(R, "sys/kernel/mm/transparent_hugepage/enabled")
    os.makedirs(os.path.dirname(p), exist_ok=True)
    modes = ["always", "madvise", "never"]
    open(p, "w").write(" ".join("[%s]" % x if x == thp.group(1) else x for x in modes) + "\n")
if gov:
    p = os.path.join(R, "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    os.makedirs(os.path.dirname(p), exist_ok=True)
    open(p, "w").write(gov.group(1) + "\n")
env = dict(os.environ, KEEL_DOCTOR_ROOT=R)
fake = json.loads(subprocess.run([KEEL, "doctor", "--json", "--data-dir", T], capture_output=True, text=True,
                                 env=env).stdout or "{}")
st = {c["id"]: c["status"] for c in fake.get("checks", [])}
want = ["kernel.swappiness", "kernel.overcommit_memory", "net.somaxconn", "net.tcp_max_syn_backlog", "kernel.thp",
        "cpu.governor"]
check("deploy_sysctl_matches_doctor", len(seen) == 4 and thp and gov and all(st.get(w) == "pass" for w in want),
      "sysctls set %s; doctor on those values: %s" % (sorted(seen), {w: st.get(w) for w in want}))

# ---------------------------------------------------------------- Kubernetes
try:
    import yaml
    docs = list(yaml.safe_load_all(open(os.path.join(D, "k8s", "keel-serve.yaml"))))
    check("deploy_k8s_parses", True)
except Exception as ex:  # ImportError included: python3-yaml is in mk/packages.txt
    check("deploy_k8s_parses", False, ex)
    done()
kinds = {d["kind"]: d for d in docs if d}
dep, svc = kinds.get("Deployment"), kinds.get("Service")
check("deploy_k8s_kinds", dep is not None and svc is not None, list(kinds))
pod = dep["spec"]["template"]
c = pod["spec"]["containers"][0]
args = c.get("args", [])
port = int(args[args.index("--port") + 1]) if "--port" in args else 8000
ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}


def probe_port(p):
    pp = p["httpGet"]["port"]
    return ports.get(pp) if isinstance(pp, str) else pp


lv, rd = c.get("livenessProbe", {}), c.get("readinessProbe", {})
check("deploy_k8s_probes",
      lv.get("httpGet", {}).get("path") == "/v2/health/live" and rd.get("httpGet", {}).get("path") == "/v2/health/ready"
      and probe_port(lv) == port and probe_port(rd) == port,
      "liveness %s readiness %s, server port %d" % (lv.get("httpGet"), rd.get("httpGet"), port))
ann = pod["metadata"].get("annotations", {})
check("deploy_k8s_prometheus", ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/path") == "/metrics"
      and int(ann.get("prometheus.io/port", 0)) == port, ann)
svc_target = svc["spec"]["ports"][0]["targetPort"]
check("deploy_k8s_service", svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
      and (ports.get(svc_target) if isinstance(svc_target, str) else svc_target) == port, svc["spec"])
et = float(args[args.index("--exit-timeout") + 1]) if "--exit-timeout" in args else 30
pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
pre_s = float(pre[-1]) if pre and pre[-1].replace(".", "").isdigit() else 0
grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
res = c.get("resources", {})
check("deploy_k8s_termination", grace > et + pre_s, "grace %s <= --exit-timeout %s + preStop %s" % (grace, et, pre_s))
cpu = str(res.get("limits", {}).get("cpu", ""))
wk = int(args[args.index("--workers") + 1]) if "--workers" in args else 0
tpw = int(args[args.index("--threads-per-worker") + 1]) if "--threads-per-worker" in args else 1
check("deploy_k8s_resources", res.get("requests") and res.get("limits") and cpu.isdigit() and int(cpu) == wk * tpw,
      "resources %s, --workers %d x --threads-per-worker %d" % (res, wk, tpw))
check("deploy_k8s_command", c.get("command", [""])[0].endswith("/keel") and args[:1] == ["serve"], (c.get("command"), args))
try_server("deploy_k8s_args", args, grace)
done()
