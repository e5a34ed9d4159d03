#!/usr/bin/python3
"""The prefix check behind docs/architecture.md's naming convention: every
global symbol libkeel defines starts with `kl_` (public `kl_<module>_...`, or
`kl__...` shared across files of the library but not public); a helper used
by one file only is `static`. And no public type name is defined twice in
include/keel/*.h.

Rules:
  1. `nm` on the library (default build/libkeel.a): each defined global symbol
     (types T, D, B, R, C, V, W, G, S, u) of an object that is not listed in
     ALLOWED_OBJECTS must start with `kl_`; each offender is reported as
     `OBJECT: SYMBOL (type)`;
  2. ALLOWED_OBJECTS names the objects keel does not write (generated
     third-party code) together with the prefix their symbols keep;
  3. a type name (`typedef ... NAME;`, `} NAME;`, `struct|enum|union NAME {`)
     defined in more than one place of include/keel/*.h is reported with the
     places.

usage: tools/check_symbols.py [--lib FILE] [--root DIR]
  --lib FILE  the archive to read (default: ROOT/$BUILD/libkeel.a, BUILD=build)
  --root DIR  the tree whose include/keel/ is read (default: this repository)
Exit status 0 when clean, 1 with one line per violation otherwise, 2 when the
library cannot be read.
"""
import glob
import os
import re
import subprocess
import sys

# Objects keel does not write, with the prefix every global symbol of each keeps:
# protobuf-c code generated from Debian's onnx.proto into build/gen/onnx/.
ALLOWED_OBJECTS = {
    "onnx.pb-c.o": "onnx__",
    "onnx_data.pb-c.o": "onnx__",
}
GLOBAL_TYPES = set("TDBRCVWGSu")
PREFIX = "kl_"


def die(msg):
    print("check_symbols: " + msg, file=sys.stderr)
    sys.exit(2)


def nm_symbols(lib):
    """(object, symbol, type) of each defined global symbol of the archive."""
    if not os.path.isfile(lib):
        die("%s: no such library (run make first)" % lib)
    try:
        out = subprocess.run(["nm", "-A", "-g", "--defined-only", lib], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        die("nm %s: %s" % (lib, e))
    syms = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue  # an undefined or odd line: --defined-only keeps address, type, name
        where, typ, name = parts
        obj = where[len(lib) + 1:].split(":")[0] if where.startswith(lib + ":") else where.split(":")[-2]
        if typ in GLOBAL_TYPES:
            syms.append((obj, name, typ))
    return syms


def symbol_violations(syms):
    bad = []
    for obj, name, typ in syms:
        allowed = ALLOWED_OBJECTS.get(obj)
        if allowed is not None:
            if not name.startswith(allowed):
                bad.append("%s: %s (%s): generated object, expected prefix %s" % (obj, name, typ, allowed))
        elif not name.startswith(PREFIX):
            bad.append("%s: %s (%s): global symbol without the kl_ prefix "
                       "(make it static, or name it kl__... when other files use it)" % (obj, name, typ))
    return bad


TYPE_RES = [
    re.compile(r"\}\s*(\w+)\s*;"),
    re.compile(r"typedef\s+[^;{}()]*?\b(\w+)\s*;"),
    re.compile(r"\btypedef\s+[^;{}]*\(\s*\*\s*(\w+)\s*\)\s*\("),
]
TAG_RE = re.compile(r"\b(struct|enum|union)\s+(\w+)\s*\{")


def type_violations(root):
    where = {}
    for path in sorted(glob.glob(os.path.join(root, "include", "keel", "*.h"))):
        text = open(path, encoding="utf-8", errors="replace").read()
        text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
        text = re.sub(r"//[^\n]*", "", text)
        rel = os.path.relpath(path, root)
        for rx in TYPE_RES:
            for m in rx.finditer(text):
                where.setdefault(m.group(1), []).append("%s:%d" % (rel, text.count("\n", 0, m.start()) + 1))
        for m in TAG_RE.finditer(text):
            key = m.group(1) + " " + m.group(2)
            where.setdefault(key, []).append("%s:%d" % (rel, text.count("\n", 0, m.start()) + 1))
    return ["public type %s defined twice: %s" % (name, ", ".join(places))
            for name, places in sorted(where.items()) if len(places) > 1]


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lib = None
    i = 0
    while i < len(argv):
        if argv[i] in ("--lib", "--root") and i + 1 < len(argv):
            if argv[i] == "--lib":
                lib = argv[i + 1]
            else:
                root = argv[i + 1]
            i += 2
        else:
            die("usage: check_symbols.py [--lib FILE] [--root DIR]")
    if lib is None:
        build = os.environ.get("BUILD", "build")
        lib = build if os.path.isabs(build) else os.path.join(root, build)
        lib = os.path.join(lib, "libkeel.a")
    bad = symbol_violations(nm_symbols(lib)) + type_violations(root)
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
