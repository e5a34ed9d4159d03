"""keel serve: request smuggling (RFC 9112) and hostile request targets over raw
sockets against the real binary. Each variant hides a second request
(`POST /v2/repository/models/m/unload`) after a first one whose length the
server and a proxy could read differently: duplicate or conflicting
Content-Length, Content-Length with Transfer-Encoding, whitespace before the
colon, obs-fold, a Transfer-Encoding other than chunked, a Content-Length that
is not plain digits, and %00 / control characters in the path. Every one must
be answered 400 with the connection closed, and the hidden unload must never
run (model m stays READY). Issue 22 item 4."""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import Server, check, done, tmpdir, write_mlp  # noqa: E402

repo = tmpdir("serve-smuggle-")
write_mlp(os.path.join(repo, "m", "1", "model.onnx"), sizes=(4, 8, 2))

SMUG = b"POST /v2/repository/models/m/unload HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
H = b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\n"

CASES = {
    "dup_content_length_differ": H + b"Content-Length: 0\r\nContent-Length: %d\r\n\r\n" % len(SMUG) + SMUG,
    "dup_content_length_same": H + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}" + SMUG,
    "content_length_and_chunked": H + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUG,
    "te_space_before_colon": H + b"Content-Length: 5\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n" + SMUG,
    "cl_tab_before_colon": H + b"Content-Length\t: 0\r\n\r\n" + SMUG,
    "obs_fold": H + b"X-Pad: 1\r\n chunked\r\nContent-Length: 0\r\n\r\n" + SMUG,
    "obs_fold_tab_content_length": H + b"Content-Length: %d\r\n\t0\r\n\r\n" % len(SMUG) + SMUG,
    "te_not_chunked": H + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + SMUG,
    "dup_transfer_encoding": H + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUG,
    "content_length_plus": H + b"Content-Length: +0\r\n\r\n" + SMUG,
    "content_length_hex": H + b"Content-Length: 0x0\r\n\r\n" + SMUG,
    "content_length_list": H + b"Content-Length: 0, 0\r\n\r\n" + SMUG,
    "path_nul": b"GET /v2/models/m%00x/ready HTTP/1.1\r\nHost: x\r\n\r\n" + SMUG,
    "path_control": b"GET /v2/models/m%01x HTTP/1.1\r\nHost: x\r\n\r\n" + SMUG,
    "path_nul_infer": b"POST /v2/models/m%00/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" + SMUG,
}


def raw(port, data, wait=5.0):
    """Sends data; returns (bytes answered, closed by the server)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    s.sendall(data)
    out, closed, t0 = b"", False, time.time()
    try:
        while time.time() - t0 < wait:
            d = s.recv(65536)
            if not d:
                closed = True
                break
            out += d
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    s.close()
    return out, closed


s = Server(repo)
try:
    st, h, b = s.json("GET", "/v2/models/m/ready")
    check("serve_smuggle_model_ready_first", st == 200, (st, b))
    for name, data in CASES.items():
        out, closed = raw(s.port, data)
        status = out.split(b"\r\n", 1)[0]
        answers = out.count(b"HTTP/1.1 ")
        st, h, b = s.json("GET", "/v2/models/m/ready")
        check("serve_smuggle_" + name, status.startswith(b"HTTP/1.1 400") and closed and b" 200 " not in out
              and st == 200, (out[:300], closed, answers, st, b))
    # the rules do not touch ordinary traffic: two pipelined requests on one connection
    two = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\nPOST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    out, closed = raw(s.port, two, wait=1.0)
    check("serve_smuggle_pipelined_valid_requests_answered", out.count(b"HTTP/1.1 200") == 2 and not closed, out[:400])
    st, h, b = s.json("POST", "/v2/repository/index")
    check("serve_smuggle_hidden_unload_never_ran", st == 200 and [m["state"] for m in b if m["name"] == "m"] == ["READY"], b)
    rc = s.stop()
    check("serve_smuggle_sigterm_exit_0", rc == 0, rc)
finally:
    if s.p.poll() is None:
        s.p.kill()
done()
