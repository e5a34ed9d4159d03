"""The objects a kustomization directory builds, for the deployment tests
(no kubectl or kustomize on the build machine): `resources` (files, or
directories holding their own kustomization.yaml) and `patches` that are
RFC 6902 JSON patches (add, replace, remove) selected by target kind and
name. Anything else in a kustomization.yaml is refused, so a manifest that
uses more than this cannot pass the tests unnoticed."""
import os

import yaml

KNOWN = {"resources", "patches"}


def _pointer(path):
    assert path.startswith("/"), path
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _apply_op(doc, op):
    parts = _pointer(op["path"])
    parent = doc
    for p in parts[:-1]:
        parent = parent[int(p)] if isinstance(parent, list) else parent[p]
    last = parts[-1]
    kind = op["op"]
    if isinstance(parent, list):
        if kind == "add":
            idx = len(parent) if last == "-" else int(last)
            assert 0 <= idx <= len(parent), op["path"]
            parent.insert(idx, op["value"])
        elif kind == "replace":
            assert 0 <= int(last) < len(parent), op["path"]
            parent[int(last)] = op["value"]
        elif kind == "remove":
            del parent[int(last)]
        else:
            raise ValueError("unsupported patch op %r" % kind)
    else:
        if kind in ("add", "replace"):
            if kind == "replace":
                assert last in parent, op["path"]
            parent[last] = op["value"]
        elif kind == "remove":
            del parent[last]
        else:
            raise ValueError("unsupported patch op %r" % kind)


def build(root):
    """The list of objects `kubectl apply -k root` would apply."""
    k = yaml.safe_load(open(os.path.join(root, "kustomization.yaml")))
    extra = set(k) - KNOWN
    if extra:
        raise ValueError("%s: kustomization fields this checker does not model: %s" % (root, sorted(extra)))
    docs = []
    for r in k.get("resources", []):
        p = os.path.normpath(os.path.join(root, r))
        if os.path.isdir(p):
            docs += build(p)
        else:
            docs += [d for d in yaml.safe_load_all(open(p)) if d]
    for patch in k.get("patches", []):
        t = patch["target"]
        ops = yaml.safe_load(patch["patch"])
        hits = [d for d in docs if d["kind"] == t["kind"] and d["metadata"]["name"] == t["name"]]
        if not hits:
            raise ValueError("%s: patch target %s/%s matches nothing" % (root, t["kind"], t["name"]))
        for d in hits:
            for op in ops:
                _apply_op(d, op)
    return docs


def find(docs, kind, name):
    for d in docs:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise KeyError("%s/%s" % (kind, name))
