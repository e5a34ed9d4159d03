#!/usr/bin/python3
"""The include check behind docs/architecture.md: reads every #include in
src/, app/ and include/keel/ and fails, naming file:line and the rule, when a
module includes a header its row of the module table does not allow.

The allowed edges are read from ONE place: the tables between the
<!-- deps:modules --> / <!-- deps:libraries --> / <!-- deps:system --> markers
of docs/architecture.md (the tables a reader sees are the tables checked).
Rules:
  1. a public header include/keel/X.h belongs to the module whose row names it;
     a module may include its own public headers and those of the modules in
     its "uses (modules)" cell;
  2. a private header (src/M/..., "M/x.h", or a "x.h" beside the file) is
     included only inside module M;
  3. an outside library's header only by the modules whose "uses (outside)"
     cell names the library; system headers (C, POSIX, compiler) by anyone;
     a header in none of the tables is an error (add it to a table);
  4. the table is true both ways: an edge a row lists but no file uses is
     reported as stale, and module edges must form no cycle.

usage: tools/check_deps.py [--root DIR] [--edges]
  --root DIR  the tree to check (default: the repository holding this file)
  --edges     print the edges the code has (module -> modules / libraries)
Exit status 0 when clean, 1 with one line per violation otherwise.
"""
import fnmatch
import os
import re
import sys

DOC = "docs/architecture.md"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def die(msg):
    print("check_deps: " + msg, file=sys.stderr)
    sys.exit(2)


def table_rows(text, marker):
    """The cells of the markdown table after <!-- deps:MARKER -->."""
    m = re.search(r"<!-- deps:%s -->\n(.*?)<!-- /deps:%s -->" % (marker, marker), text, re.S)
    if not m:
        die("%s has no <!-- deps:%s --> ... <!-- /deps:%s --> block" % (DOC, marker, marker))
    rows = []
    for line in m.group(1).splitlines():
        line = line.strip()
        if not line.startswith("|") or re.match(r"^\|[\s:|-]+\|$", line):
            continue
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows[1:]  # without the heading row


def names(cell):
    """`core`, `tensor` (to be removed: issue 24), - -> ['core', 'tensor']."""
    cell = re.sub(r"\([^)]*\)", "", cell)
    return [n.strip(" `") for n in cell.split(",") if n.strip(" `-")]


def load_tables(root):
    path = os.path.join(root, DOC)
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as ex:
        die("cannot read %s: %s" % (path, ex))
    modules = {}  # name -> {folder, headers, uses, libs}
    for r in table_rows(text, "modules"):
        if len(r) != 5:
            die("%s: module row %r: expected 5 cells (folder, owns, public headers, uses modules, uses outside)" % (DOC, r))
        folder = r[0].strip("` ").rstrip("/")
        name = os.path.basename(folder)
        modules[name] = {"folder": folder, "headers": set(names(r[2])), "uses": set(names(r[3])),
                         "libs": set(names(r[4]))}
    libs = {}  # library -> header patterns
    for r in table_rows(text, "libraries"):
        libs[r[0].strip("` ")] = names(r[1])
    system = []
    for r in table_rows(text, "system"):
        system += names(r[1])
    for name, m in modules.items():
        for u in m["uses"]:
            if u not in modules:
                die("%s: module %s uses unknown module %s" % (DOC, name, u))
        for l in m["libs"]:
            if l not in libs:
                die("%s: module %s uses library %s, which the library table does not list" % (DOC, name, l))
    return modules, libs, system


def source_files(root, modules):
    folders = {m["folder"] for m in modules.values()}
    src = os.path.join(root, "src")
    for d in sorted(os.listdir(src)) if os.path.isdir(src) else []:
        if os.path.isdir(os.path.join(src, d)) and "src/" + d not in folders:
            yield None, "src/" + d + "/"  # a module folder the table does not know
    for name, m in sorted(modules.items()):
        top = os.path.join(root, m["folder"])
        for d, _, files in sorted(os.walk(top)):
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    yield name, os.path.relpath(os.path.join(d, f), root)
    inc = os.path.join(root, "include", "keel")
    owner = {h: n for n, m in modules.items() for h in m["headers"]}
    for f in sorted(os.listdir(inc)) if os.path.isdir(inc) else []:
        if f.endswith(".h"):
            yield owner.get(f), os.path.join("include", "keel", f)


def classify(hdr, quoted, src, root, modules, libs, system):
    """(kind, target): ('module', M) / ('private', M) / ('lib', L) / ('system', None) / ('unknown', None)."""
    if hdr.startswith("keel/"):
        base = hdr[len("keel/"):]
        for n, m in modules.items():
            if base in m["headers"]:
                return "module", n
        return "unknown-public", None
    if quoted:
        first = hdr.split("/")[0]
        if "/" in hdr and first in modules:
            return "private", first
        if "/" not in hdr and os.path.exists(os.path.join(root, os.path.dirname(src), hdr)):
            return "private", None  # beside the including file: its own module
    for lib, pats in libs.items():
        if any(fnmatch.fnmatch(hdr, p) for p in pats):
            return "lib", lib
    if any(fnmatch.fnmatch(hdr, p) for p in system):
        return "system", None
    return "unknown", None


def check(root):
    modules, libs, system = load_tables(root)
    errors, used = [], {n: set() for n in modules}
    for mod, src in source_files(root, modules):
        if mod is None and src.endswith("/"):
            errors.append("%s: module folder in no row of %s (add its row: what it owns, what it may use)" % (src, DOC))
            continue
        if mod is None:
            errors.append("%s:1: public header owned by no module (add it to a row's public headers in %s)" % (src, DOC))
            continue
        m = modules[mod]
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as fh:
            for ln, line in enumerate(fh, 1):
                mm = INCLUDE_RE.match(line)
                if not mm:
                    continue
                quoted, hdr = mm.group(1) == '"', mm.group(2)
                kind, tgt = classify(hdr, quoted, src, root, modules, libs, system)
                where = "%s:%d: %s includes %s%s%s" % (src, ln, mod, mm.group(1), hdr, '"' if quoted else ">")
                if kind == "module":
                    used[mod].add(("module", tgt))
                    if tgt != mod and tgt not in m["uses"]:
                        errors.append("%s: public header of module %s, which %s may not use (its row in %s uses: %s)"
                                      % (where, tgt, mod, DOC, ", ".join(sorted(m["uses"])) or "-"))
                elif kind == "private":
                    if tgt is not None and tgt != mod:
                        errors.append("%s: private header of module %s (private headers are included only inside "
                                      "their own folder; use include/keel/%s's API)" % (where, tgt, tgt))
                elif kind == "lib":
                    used[mod].add(("lib", tgt))
                    if tgt not in m["libs"]:
                        errors.append("%s: header of outside library %s, which %s may not use (its row in %s "
                                      "uses outside: %s)" % (where, tgt, mod, DOC, ", ".join(sorted(m["libs"])) or "-"))
                elif kind == "unknown-public":
                    errors.append("%s: no module owns this public header (add it to a row of %s)" % (where, DOC))
                elif kind == "unknown":
                    errors.append("%s: header in no table of %s (an outside library goes in the library table "
                                  "and the using module's row; a C/POSIX header in the system list)" % (where, DOC))
    for n, m in sorted(modules.items()):
        for u in sorted(m["uses"] - {t for k, t in used[n] if k == "module"}):
            errors.append("%s: module %s lists uses %s, but no file of %s includes its headers (stale: remove it)"
                          % (DOC, n, u, n))
        for l in sorted(m["libs"] - {t for k, t in used[n] if k == "lib"}):
            errors.append("%s: module %s lists outside library %s, but no file of %s includes its headers (stale: "
                          "remove it)" % (DOC, n, l, n))
    errors += cycles(modules)
    return errors, used


def cycles(modules):
    out, state = [], {}

    def visit(n, path):
        state[n] = 1
        for u in sorted(modules[n]["uses"]):
            if u == n:
                continue
            if state.get(u) == 1:
                out.append("%s: module edges form a cycle: %s (dependencies point down only)"
                           % (DOC, " -> ".join(path[path.index(u):] + [u]) if u in path else n + " -> " + u))
            elif not state.get(u):
                visit(u, path + [u])
        state[n] = 2

    for n in sorted(modules):
        if not state.get(n):
            visit(n, [n])
    return out


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    edges = False
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--root" and args:
            root = args.pop(0)
        elif a == "--edges":
            edges = True
        else:
            print(__doc__.split("usage:")[1].strip(), file=sys.stderr)
            return 2
    errors, used = check(root)
    if edges:
        for n in sorted(used):
            mods = sorted(t for k, t in used[n] if k == "module" and t != n)
            ls = sorted(t for k, t in used[n] if k == "lib")
            print("%-9s modules: %-60s outside: %s" % (n, ", ".join(mods) or "-", ", ".join(ls) or "-"))
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
