"""deploy/nginx/keel.conf in front of two real `keel serve` replicas: the
config passes `nginx -t`, requests through nginx reach both replicas, and
after one replica is killed every request still succeeds (passive failover
with proxy_next_upstream). nginx is Debian's binary unpacked into build/nginx
by tools/get-nginx.sh (the package itself is not installed: it would start a
system nginx on port 80). Everything listens on 127.0.0.1 only."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import http.client

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import Server, check, done, tmpdir, write_meta, write_mlp  # noqa: E402

SRC = os.environ.get("KEEL_SRC", ".")
BUILD = os.environ.get("BUILD", "build")
CONF = os.path.join(SRC, "deploy", "nginx", "keel.conf")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def get(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


text = open(CONF).read()
check("deploy_nginx_conf_passive_checks", re.search(r"server 127\.0\.0\.1:\d+ max_fails=\d+ fail_timeout=\d+s;", text)
      and "keepalive " in text and "proxy_next_upstream " in text and "NGINX Plus" in text,
      "keel.conf lacks max_fails/fail_timeout, keepalive, proxy_next_upstream or the passive-checks note")

nginx_dir = os.path.join(os.path.abspath(os.path.join(SRC, BUILD)), "nginx")
g = subprocess.run(["bash", os.path.join(SRC, "tools", "get-nginx.sh"), nginx_dir], capture_output=True, text=True)
nginx = g.stdout.strip()
if g.returncode != 0 or not os.path.exists(nginx):
    check("deploy_nginx_binary", False, "could not get Debian's nginx binary (tools/get-nginx.sh): " + g.stderr[-400:])
    done()
check("deploy_nginx_binary", True)

# a small model in a repository both replicas serve
repo = tmpdir("nginx-repo-")
vdir = os.path.join(repo, "mlp", "1")
write_mlp(os.path.join(vdir, "model.onnx"), sizes=(8, 16, 4))
write_meta(vdir)
servers = [Server(repo, "--workers", "1"), Server(repo, "--workers", "1")]

# keel.conf with the replicas' ports and a free listen port, in a minimal nginx.conf
T = tmpdir("nginx-")
lport = free_port()
conf = text
ports = [s.port for s in servers]
ups = iter(ports)
conf = re.sub(r"server 127\.0\.0\.1:\d+ ", lambda m: "server 127.0.0.1:%d " % next(ups), conf)
conf = conf.replace("listen 80;", "listen 127.0.0.1:%d;" % lport)
for d in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
    os.makedirs(os.path.join(T, d), exist_ok=True)
with open(os.path.join(T, "keel.conf"), "w") as f:
    f.write(conf)
main = """%s
worker_processes 1;
daemon off;
pid %s/nginx.pid;
error_log %s/error.log warn;
events { worker_connections 256; }
http {
    access_log %s/access.log;
    client_body_temp_path %s/client_body;
    proxy_temp_path %s/proxy;
    fastcgi_temp_path %s/fastcgi;
    uwsgi_temp_path %s/uwsgi;
    scgi_temp_path %s/scgi;
    include %s/keel.conf;
}
""" % (("user root root;" if os.getuid() == 0 else ""), T, T, T, T, T, T, T, T, T)
with open(os.path.join(T, "nginx.conf"), "w") as f:
    f.write(main)

t = subprocess.run([nginx, "-t", "-p", T, "-e", os.path.join(T, "t.log"), "-c", os.path.join(T, "nginx.conf")],
                   capture_output=True, text=True)
check("deploy_nginx_config_test", t.returncode == 0 and "test is successful" in t.stderr, t.stderr[-500:])

ng = subprocess.Popen([nginx, "-p", T, "-e", os.path.join(T, "error.log"), "-c", os.path.join(T, "nginx.conf")],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    up = False
    for _ in range(100):
        try:
            up = get(lport, "GET", "/nginx-health")[0] == 200
            break
        except OSError:
            time.sleep(0.1)
    check("deploy_nginx_starts", up, open(os.path.join(T, "error.log")).read()[-400:] if not up else "")
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.5] * 8}]})
    st, _ = get(lport, "GET", "/v2/health/ready")
    check("deploy_nginx_ready_through_proxy", st == 200, "status %d" % st)
    sts = [get(lport, "POST", "/v2/models/mlp/infer", body)[0] for _ in range(20)]
    check("deploy_nginx_infer_through_proxy", sts == [200] * 20, sts)
    # both replicas answered (their access logs name each inference request; a
    # server writes a request's line after its answer: wait for the last ones)
    for _ in range(50):
        counts = [s.logtext().count('"status":200') + s.logtext().count("status=200") for s in servers]
        if sum(counts) >= 20:
            break
        time.sleep(0.05)
    check("deploy_nginx_both_replicas_used", all(c > 0 for c in counts) and sum(counts) == 20, "requests per replica: %s" % counts)
    st, _ = get(lport, "GET", "/metrics")
    check("deploy_nginx_metrics_not_balanced", st == 404, "status %d" % st)
    # one replica dies: passive failover keeps every request answered
    servers[0].p.send_signal(signal.SIGKILL)
    servers[0].p.wait()
    sts = [get(lport, "POST", "/v2/models/mlp/infer", body)[0] for _ in range(20)]
    check("deploy_nginx_failover", sts == [200] * 20, sts)
finally:
    ng.send_signal(signal.SIGQUIT)
    try:
        ng.wait(10)
    except subprocess.TimeoutExpired:
        ng.kill()
        ng.wait()
    for s in servers:
        s.stop()
done()
