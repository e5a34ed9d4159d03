#!/usr/bin/python3
"""Function lengths of keel's C code: for every function defined in src/ and
app/ (or the files or folders named), the lines from its opening brace to its
closing brace, longest first. The measure behind the convention "short steps:
no function over ~100 lines" (docs/architecture.md).

usage: tools/func_lengths.py [--top N] [--over N] [PATH...]
  --top N   print the N longest (default 20)
  --over N  print every function longer than N lines instead
Prints `LINES  FILE:LINE  NAME`. Exit status 0.
"""
import os
import re
import sys

STRIP_RE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
NAME_RE = re.compile(r"([A-Za-z_]\w*)\s*\($")
NOT_FUNC = re.compile(r"^\s*(typedef|struct|enum|union|static\s+const|const)\b|=")


def blank(m):
    """A comment or literal as spaces, newlines kept (line numbers stay)."""
    return re.sub(r"[^\n]", " ", m.group(0))


def functions(path):
    """(name, first line, lines) of each function defined in one C file."""
    text = STRIP_RE.sub(blank, open(path, encoding="utf-8", errors="replace").read())
    text = re.sub(r"^\s*#[^\n]*(\\\n[^\n]*)*", blank, text, flags=re.M)
    out, depth, start, sig = [], 0, None, ""
    for i, line in enumerate(text.split("\n"), 1):
        for ch in line:
            if ch == "{":
                if depth == 0:
                    head = sig + " " + line[: line.index("{")]
                    paren = head.find("(")
                    m = NAME_RE.search(head[: paren + 1].strip()) if paren >= 0 else None
                    start = (m.group(1), i) if m and not NOT_FUNC.match(head[:paren]) else None
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    if start:
                        out.append((start[0], start[1], i - start[1] + 1))
                    start, sig = None, ""
            elif ch == ";" and depth == 0:
                sig = ""
        if depth == 0:
            sig = (sig + " " + line) if line.strip() and "}" not in line and ";" not in line else ""
    return out


def c_files(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for d, _, names in sorted(os.walk(p)):
            for n in sorted(names):
                if n.endswith(".c"):
                    yield os.path.join(d, n)


def main(argv):
    top, over, paths = 20, None, []
    i = 0
    while i < len(argv):
        if argv[i] in ("--top", "--over") and i + 1 < len(argv):
            if argv[i] == "--top":
                top = int(argv[i + 1])
            else:
                over = int(argv[i + 1])
            i += 2
        else:
            paths.append(argv[i])
            i += 1
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not paths:
        paths = [os.path.join(root, "src"), os.path.join(root, "app")]
    rows = []
    for f in c_files(paths):
        rel = os.path.relpath(f, root) if f.startswith(root) else f
        rows += [(n, rel, line, name) for name, line, n in functions(f)]
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    if over is not None:
        rows = [r for r in rows if r[0] > over]
    else:
        rows = rows[:top]
    for n, f, line, name in rows:
        print("%5d  %s:%d  %s" % (n, f, line, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
