#!/usr/bin/python3
"""The format check of make test: the C lines a change touches must be laid out
as .clang-format says (clang-format --lines on the touched ranges only; files
are never reformatted whole).

Which change: the working tree (staged or not) against BASE, where BASE is
  $KEEL_FORMAT_BASE when set, else
  the merge-base of HEAD with main (or origin/main) when HEAD is ahead of it, else
  HEAD~1 (a clean clone of main checks its last commit and any local edits).
Not a git repository, no commits, or no such base: the check is skipped (exit 0,
with a line saying why).

Tolerated (the house writes them and clang-format cannot keep them): a
difference that is only where lines break, for lines that fit 120 columns
(`if (!p) { rc = KL_ENOMEM; goto fail; }` or a one-line `do { ... } while (0)`
macro; a declaration broken before 120), and the indentation of a continuation
line; never an opening brace on a line of its own, tabs, or a statement
indented off its block.
Everything else clang-format would change on a touched line is reported as
FILE:LINE with the line as it is and as clang-format writes it.

usage: tools/check_format.py [--root DIR]
Exit status 0 when clean (or skipped), 1 with the offending lines otherwise.
"""
import difflib
import os
import re
import subprocess
import sys

COLS = 120
EXTS = (".c", ".h")
DIRS = ("src/", "app/", "include/", "tests/", "fuzz/", "bench/", "tools/")


def git(root, *args):
    r = subprocess.run(["git", "-C", root] + list(args), capture_output=True, text=True, errors="replace")
    return r.returncode, r.stdout.strip()


def pick_base(root):
    if os.environ.get("KEEL_FORMAT_BASE"):
        return os.environ["KEEL_FORMAT_BASE"], "KEEL_FORMAT_BASE"
    rc, head = git(root, "rev-parse", "--verify", "-q", "HEAD")
    if rc:
        return None, "no commits"
    for ref in ("main", "origin/main"):
        rc, mb = git(root, "merge-base", "HEAD", ref)
        if rc == 0 and mb and mb != head:
            return mb, "merge-base with " + ref
    rc, parent = git(root, "rev-parse", "--verify", "-q", "HEAD~1")
    if rc == 0:
        return parent, "HEAD~1"
    return None, "no parent commit"


def touched(root, base):
    """{path: [(first, last), ...]} of added/changed lines in the working tree vs base."""
    rc, out = git(root, "diff", "-U0", "--no-color", "--no-ext-diff", "--diff-filter=AMR", "-M", base, "--")
    if rc:
        return None
    ranges, path = {}, None
    for line in out.splitlines():
        if line.startswith("+++ "):
            p = line[4:]
            path = p[2:] if p.startswith("b/") else None
            if path and not (path.endswith(EXTS) and path.startswith(DIRS)):
                path = None
        elif line.startswith("@@") and path:
            m = re.match(r"@@ -\S+ \+(\d+)(?:,(\d+))? @@", line)
            first, count = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
            if count:
                ranges.setdefault(path, []).append((first, first + count - 1))
    # untracked new files count as wholly touched
    rc, out = git(root, "ls-files", "--others", "--exclude-standard", "--", *DIRS)
    for p in out.splitlines() if rc == 0 else []:
        if p.endswith(EXTS):
            with open(os.path.join(root, p), encoding="utf-8", errors="replace") as fh:
                n = sum(1 for _ in fh)
            if n:
                ranges[p] = [(1, n)]
    return ranges


def collapse(s):
    """Text with line continuations, runs of blanks and the blanks just inside
    braces made canonical (a braced list broken after `{` or joined by
    clang-format compares equal)."""
    s = re.sub(r"\s+", " ", re.sub(r"\\\n", " ", s).strip())
    return re.sub(r"\{ ", "{", re.sub(r" \}", "}", s))


def indent(s):
    return len(s) - len(s.lstrip(" "))


def starts_statement(prev):
    """Whether the line after prev starts a statement (its indentation is the
    block's) rather than continuing one (aligned as the author chose)."""
    p = prev.rstrip()
    return not p or p.endswith((";", "{", "}", ":", "*/")) or p.lstrip().startswith(("#", "//"))


def only_breaks(old, new, prev):
    """True when old and new differ only in where lines break (see the module comment)."""
    if any(len(o) > COLS or "\t" in o for o in old):
        return False
    if any(o.strip() == "{" for o in old):
        return False
    if collapse("\n".join(old)) != collapse("\n".join(new)):
        return False
    if old and new and starts_statement(prev) and indent(old[0]) != indent(new[0]):
        return False
    return True


def check_file(root, path, ranges, clang):
    full = os.path.join(root, path)
    with open(full, encoding="utf-8", errors="replace") as fh:
        src = fh.read()
    args = [clang, "--style=file", "--assume-filename=" + full]
    args += ["--lines=%d:%d" % r for r in ranges]
    r = subprocess.run(args, input=src, capture_output=True, text=True)
    if r.returncode:
        return ["%s:1: clang-format failed: %s" % (path, r.stderr.strip()[:300])]
    a, b = src.splitlines(), r.stdout.splitlines()
    errors = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if i2 > i1:  # old lines i1+1..i2 (1-based) must overlap a touched range
            hit = any(i1 + 1 <= last and i2 >= first for first, last in ranges)
        else:  # an insertion before old line i1+1
            hit = any(first - 1 <= i1 <= last for first, last in ranges)
        if not hit:
            continue  # clang-format changed an untouched neighbour only
        if only_breaks(a[i1:i2], b[j1:j2], a[i1 - 1] if i1 else ""):
            continue
        was = " / ".join(s.rstrip() for s in a[i1:i2])[:300] or "(nothing)"
        wide = max((len(s) for s in a[i1:i2]), default=0)
        if wide > COLS:
            was += "  [%d columns, the limit is %d]" % (wide, COLS)
        want = " / ".join(s if k else s.rstrip() for k, s in enumerate(b[j1:j2]))[:300] or "(nothing)"
        errors.append("%s:%d: layout differs from .clang-format\n    is:     %s\n    should: %s" % (path, i1 + 1, was, want))
    return errors


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if argv[:1] == ["--root"] and len(argv) > 1:
        root = argv[1]
    rc, top = git(root, "rev-parse", "--show-toplevel")
    if rc:
        print("check_format: skipped (not a git repository)")
        return 0
    clang = os.environ.get("CLANG_FORMAT", "clang-format")
    if subprocess.run(["sh", "-c", "command -v " + clang], capture_output=True).returncode:
        print("check_format: clang-format not found (Debian package clang-format, mk/packages.txt)", file=sys.stderr)
        return 1
    base, why = pick_base(top)
    if base is None:
        print("check_format: skipped (%s)" % why)
        return 0
    ranges = touched(top, base)
    if ranges is None:
        print("check_format: skipped (cannot diff against %s)" % base)
        return 0
    errors = []
    for path in sorted(ranges):
        if os.path.exists(os.path.join(top, path)):
            errors += check_file(top, path, ranges[path], clang)
    n = sum(len(v) for v in ranges.values())
    print("check_format: %d files, %d changed ranges against %s (%s): %d layout differences"
          % (len(ranges), n, base[:12], why, len(errors)))
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
