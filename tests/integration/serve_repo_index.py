"""keel serve: the repository index lists every version a scan refused, with
its state (UNAVAILABLE) and reason, beside the ready ones (docs/serving.md;
issue 22 item 13d: refused versions were left out). A model with a good
version 1 and a corrupt version 2 (version_policy: all), then a rescan that
repairs version 2, then an unload."""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import Server, check, done, tmpdir, write_mlp  # noqa: E402

repo = tmpdir("serve-index-")
write_mlp(os.path.join(repo, "mixed", "1", "model.onnx"), sizes=(4, 8, 2))
os.makedirs(os.path.join(repo, "mixed", "2"))
with open(os.path.join(repo, "mixed", "2", "model.onnx"), "wb") as f:
    f.write(b"\x08\x07not an onnx model")
with open(os.path.join(repo, "mixed", "config.yaml"), "w") as f:
    f.write("version_policy: all\n")

s = Server(repo)
try:
    st, h, b = s.json("POST", "/v2/repository/index")
    entries = {(m["name"], m.get("version")): m for m in b} if st == 200 else {}
    v1, v2 = entries.get(("mixed", "1"), {}), entries.get(("mixed", "2"), {})
    check("serve_index_lists_ready_version", v1.get("state") == "READY", b)
    check("serve_index_lists_refused_version_with_reason", v2.get("state") == "UNAVAILABLE" and "model.onnx" in v2.get("reason", "")
          and len(b) == 2, b)
    st, h, bm = s.json("GET", "/v2/models/mixed")
    check("serve_index_refused_version_not_served", st == 200 and bm.get("versions") == ["1"], (st, bm))
    # repaired: the next scan serves it and the index shows it READY
    shutil.copy(os.path.join(repo, "mixed", "1", "model.onnx"), os.path.join(repo, "mixed", "2", "model.onnx"))
    stl, h, bl = s.json("POST", "/v2/repository/models/mixed/load")
    st, h, b = s.json("POST", "/v2/repository/index")
    check("serve_index_repaired_version_ready", stl == 200 and sorted((m.get("version"), m["state"]) for m in b) ==
          [("1", "READY"), ("2", "READY")], (stl, bl, b))
    st, h, b = s.json("POST", "/v2/repository/models/mixed/unload")
    st, h, b = s.json("POST", "/v2/repository/index")
    check("serve_index_unloaded_model", [m["state"] for m in b] == ["UNLOADED"], b)
    check("serve_index_sigterm_exit_0", s.stop() == 0)
finally:
    if s.p.poll() is None:
        s.p.kill()
done()
