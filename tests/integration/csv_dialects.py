"""CSV dialects (issue 26): a corpus of dialect variants generated here --
every dialect option of the schema (delimiters of one and several bytes,
quote characters and none, backslash escapes, CR/CRLF records, a preamble,
several header rows, no header, comment lines, UTF-16/Latin-1/Windows-1252,
decimal commas and thousands separators, trimmed fields) and combinations of
them, plus ragged and stray-quote rows for --on-error recover -- each
ingested by keel and read back (`keel data head --json`), then compared cell
for cell with DuckDB's read_csv (npm @duckdb/node-api in build/npm) given the
same dialect. Where DuckDB has no such option (several header rows, trim,
windows-1252) DuckDB reads the same table written in a dialect it has (skip=,
UTF-8, untrimmed). Also: `keel schema infer` sniffs each variant's dialect
back, and the sniffed schema ingests to the same rows."""
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylib"))
import duckdb_npm  # noqa: E402
import report as rep  # noqa: E402
from report import report  # noqa: E402

SRC = os.environ.get("KEEL_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
KEEL = os.environ.get("KEEL", os.path.join(SRC, "build", "keel"))
NPM = os.path.join(SRC, "build", "npm")
JS = os.path.join(SRC, "tests", "integration", "ingest_duckdb.mjs")
TMP = tempfile.mkdtemp(prefix="csv-dialects-", dir=os.environ.get("KEEL_TEST_TMP"))

COLS = [("id", "int64", "BIGINT"), ("name", "string", "VARCHAR"), ("price", "float64", "DOUBLE"),
        ("qty", "int64", "BIGINT"), ("note", "string", "VARCHAR")]


def duck(sql):
    env = dict(os.environ, DUCKDB_NODE_PATH=os.path.join(NPM, "node_modules"))
    r = subprocess.run(["node", JS, "query", sql], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("duckdb: " + r.stderr[-1200:])
    return json.loads(r.stdout)


def keel(*args):
    return subprocess.run([KEEL, *args], capture_output=True, text=True, timeout=600)


def table(seed, n=300, text_chars=True):
    """Rows of (id, name, price, qty, note); names hold delimiters, quotes,
    apostrophes, backslashes, newlines and non-ASCII text when text_chars."""
    rnd = random.Random(seed)
    words = ["apple", "pear", "caf\u00e9", "na\u00efve", "\u20ac sign", "\u201cq\u201d"]
    special = ["a, b", "x;y", "p|q", "say \"hi\"", "it's", "back\\slash", "two\nlines", "tab\there", "||", ", "]
    rows = []
    for i in range(n):
        name = rnd.choice(words) + str(i)
        if text_chars and i % 3 == 0:
            name = rnd.choice(special) + str(i)
        price = round(rnd.uniform(-5000, 5000), 2)
        qty = rnd.randint(-2000000, 2000000)
        note = None if i % 7 == 0 else rnd.choice(words)
        rows.append((i + 1, name, price, qty, note))
    return rows


def fmt_num(v, decimal=".", thousands=""):
    s = repr(v) if isinstance(v, float) else str(v)
    neg = s.startswith("-")
    s = s.lstrip("-")
    ip, _, fp = s.partition(".")
    if thousands:
        groups = []
        while len(ip) > 3:
            groups.insert(0, ip[-3:])
            ip = ip[:-3]
        ip = thousands.join([ip] + groups)
    out = ip + (decimal + fp if fp else "")
    return ("-" if neg else "") + out


def write_csv(rows, o):
    """The text of rows in dialect o (dict): delimiter, quote ('' none),
    escape ('' doubled), eol, header (names), header_rows, preamble lines,
    comment lines, decimal, thousands, pad (blanks around fields)."""
    d, q, esc, eol = o.get("delim", ","), o.get("quote", '"'), o.get("escape", ""), o.get("eol", "\n")
    dec, th, pad = o.get("decimal", "."), o.get("thousands", ""), o.get("pad", "")

    def cell(v, numeric):
        if v is None:
            return pad + "" + pad if pad else ""
        s = fmt_num(v, dec, th) if numeric else v
        needs = (not numeric or dec in d or th in d or (th and th == q)) and (
            any(c in s for c in (d, "\n", "\r")) or (q and q in s) or (esc and esc in s) or (pad and s != s.strip()))
        if numeric and (d in s or (q and q in s)):
            needs = True
        if needs and not q:
            raise ValueError("value needs quoting in a dialect without quotes: %r" % s)
        if needs:
            if esc:
                s = s.replace(esc, esc + esc).replace(q, esc + q)
            else:
                s = s.replace(q, q + q)
            s = q + s + q
        return pad + s + pad

    lines = list(o.get("preamble", []))
    hdr = o.get("header_lines")
    if hdr is None and o.get("header", True):
        hdr = [[c[0] for c in COLS]]
    for h in hdr or []:
        lines.append(d.join(h))
    for k, r in enumerate(rows):
        if o.get("comment") and k % 40 == 5:
            lines.append(o["comment"] + " a comment line, with " + d + " and " + (q or "") + " inside")
        lines.append(d.join(cell(v, COLS[j][1] != "string") for j, v in enumerate(r)))
    return eol.join(lines) + eol


def schema_yaml(dialect, extra=""):
    y = "name: t\n" + ("dialect:\n" if dialect else "")
    for k, v in dialect.items():
        y += f"  {k}: {json.dumps(v)}\n"
    y += "columns:\n"
    for n, t, _ in COLS:
        y += f"  - {{name: {n}, type: {t}}}\n"
    return y + extra


def sql_str(s):
    return "'" + s.replace("'", "''") + "'"


def duck_read(path, opts, header=True, skip=0):
    cols = "{" + ", ".join(f"'{n}': '{t}'" for n, _, t in COLS) + "}"
    extra = "".join(f", {k}={v}" for k, v in opts.items())
    return duck(f"SELECT * FROM read_csv({sql_str(path)}, auto_detect=false, header={'true' if header else 'false'}, "
                f"skip={skip}, columns={cols}, allow_quoted_nulls=false{extra})")


def keel_rows(ds):
    r = keel("data", "head", ds, "-n", "100000", "--json")
    if r.returncode != 0:
        raise RuntimeError("keel data head: " + r.stderr[-800:])
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


def same(a, b):
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)))
    if isinstance(b, str) and not isinstance(a, str):
        return str(a) == b
    return a == b


def compare(kr, dr, names):
    if len(kr) != len(dr):
        return f"{len(kr)} rows from keel, {len(dr)} from DuckDB"
    for i, (x, y) in enumerate(zip(kr, dr)):
        for n in names:
            if not same(x.get(n), y.get(n)):
                return f"row {i + 1} column {n}: keel {x.get(n)!r}, DuckDB {y.get(n)!r}"
    return ""


def ingest(name, text, dialect, raw=None, args=(), encoding="utf-8"):
    src = os.path.join(TMP, name + ".csv")
    with open(src, "wb") as f:
        f.write(raw if raw is not None else text.encode(encoding))
    sch = os.path.join(TMP, name + ".yaml")
    with open(sch, "w") as f:
        f.write(schema_yaml(dialect))
    ds = os.path.join(TMP, "ds-" + name)
    r = keel("ingest", src, "--schema", sch, "--out", ds, *args)
    return src, ds, r


ok, why = duckdb_npm.ensure_duckdb(NPM)
report("csv_dialects_duckdb_available", ok, why)
if not ok:
    sys.exit(0)

names = [c[0] for c in COLS]
# (name, keel dialect, writer options, DuckDB read_csv options, how DuckDB reads: None = the same file,
#  or writer options of the file DuckDB reads instead, with its own DuckDB options and skip)
V = [
    ("comma", {}, {}, {"delim": "','", "quote": "'\"'", "escape": "'\"'"}, None),
    ("semicolon_decimal_comma", {"delimiter": ";", "decimal": ",", "thousands": "."},
     {"delim": ";", "decimal": ",", "thousands": "."},
     {"delim": "';'", "quote": "'\"'", "escape": "'\"'", "decimal_separator": "','", "thousands": "'.'"}, None),
    ("tab", {"delimiter": "\t"}, {"delim": "\t"}, {"delim": "'\t'", "quote": "'\"'", "escape": "'\"'"}, None),
    ("comma_space", {"delimiter": ", "}, {"delim": ", "}, {"delim": "', '", "quote": "'\"'", "escape": "'\"'"}, None),
    ("double_pipe", {"delimiter": "||"}, {"delim": "||"}, {"delim": "'||'", "quote": "'\"'", "escape": "'\"'"}, None),
    ("backslash_escape", {"escape": "\\"}, {"escape": "\\"}, {"delim": "','", "quote": "'\"'", "escape": "'\\'"}, None),
    ("apostrophe_quote", {"quote": "'"}, {"quote": "'"}, {"delim": "','", "quote": "''''", "escape": "''''"}, None),
    ("cr_only", {"line_terminator": "cr"}, {"eol": "\r"}, {"delim": "','", "quote": "'\"'", "escape": "'\"'", "new_line": "'\\r'"}, None),
    ("crlf", {"line_terminator": "crlf"}, {"eol": "\r\n"}, {"delim": "','", "quote": "'\"'", "escape": "'\"'", "new_line": "'\\r\\n'"}, None),
    ("cr_auto", {}, {"eol": "\r"}, {"delim": "','", "quote": "'\"'", "escape": "'\"'", "new_line": "'\\r'"}, None),
    ("preamble", {"skip_rows": 3}, {"preamble": ["Sales export", "generated 2026-12-01, by: tool", ""]},
     {"delim": "','", "quote": "'\"'", "escape": "'\"'"}, ("skip", 3)),
    ("no_header", {"header": False}, {"header": False}, {"delim": "','", "quote": "'\"'", "escape": "'\"'"}, ("noheader", 0)),
    ("header_rows_2", {"header_rows": 2}, {"header_lines": [["id", "name", "price", "", "note"], ["", "", "", "qty", ""]]},
     {"delim": "','", "quote": "'\"'", "escape": "'\"'"}, ("noheader", 2)),
    ("comment", {"comment": "#"}, {"comment": "#"}, {"delim": "','", "quote": "'\"'", "escape": "'\"'", "comment": "'#'"}, None),
    ("utf16le", {"encoding": "utf-16le"}, {"encoding": "utf-16"}, {"delim": "','", "quote": "'\"'", "escape": "'\"'", "encoding": "'utf-16'"}, None),
    ("utf16be_bom", {}, {"encoding": "utf-16-be-bom"}, {"delim": "','", "quote": "'\"'", "escape": "'\"'"}, ("utf8", 0)),
    ("latin1", {"encoding": "latin-1"}, {"encoding": "latin-1", "latin": True},
     {"delim": "','", "quote": "'\"'", "escape": "'\"'", "encoding": "'latin-1'"}, None),
    ("windows1252", {"encoding": "windows-1252"}, {"encoding": "cp1252"},
     {"delim": "','", "quote": "'\"'", "escape": "'\"'"}, ("utf8", 0)),
    ("trim", {"trim": True}, {"pad": "  "}, {"delim": "','", "quote": "'\"'", "escape": "'\"'"}, ("unpadded", 0)),
    ("no_quote", {"quote": "", "delimiter": "|"}, {"quote": "", "delim": "|", "plain": True},
     {"delim": "'|'", "quote": "''", "escape": "''"}, None),
    # combinations
    ("combo_semicolon_crlf_preamble_comment", {"delimiter": ";", "decimal": ",", "line_terminator": "crlf", "skip_rows": 2, "comment": "%"},
     {"delim": ";", "decimal": ",", "eol": "\r\n", "preamble": ["title", "second line"], "comment": "%"},
     {"delim": "';'", "quote": "'\"'", "escape": "'\"'", "decimal_separator": "','", "new_line": "'\\r\\n'", "comment": "'%'"}, ("skip", 2)),
    ("combo_pipes_backslash_cr_2hdr", {"delimiter": "||", "escape": "\\", "line_terminator": "cr", "header_rows": 2},
     {"delim": "||", "escape": "\\", "eol": "\r", "header_lines": [["id", "name", "price", "", "note"], ["", "", "", "qty", ""]]},
     {"delim": "'||'", "quote": "'\"'", "escape": "'\\'", "new_line": "'\\r'"}, ("noheader", 2)),
    ("combo_apostrophe_latin1_trim", {"quote": "'", "encoding": "latin-1", "trim": True},
     {"quote": "'", "encoding": "latin-1", "latin": True, "pad": " "}, {"delim": "','", "quote": "''''", "escape": "''''"}, ("unpadded_utf8", 0)),
    ("combo_tab_thousands_utf16_skip", {"delimiter": "\t", "thousands": ",", "encoding": "utf-16le", "skip_rows": 1},
     {"delim": "\t", "thousands": ",", "encoding": "utf-16", "preamble": ["exported"]},
     {"delim": "'\t'", "quote": "'\"'", "escape": "'\"'", "thousands": "','", "encoding": "'utf-16'"}, ("skip", 1)),
]


def latinize(rows):
    """Text that Latin-1/Windows-1252 can hold (no '\u20ac' in Latin-1, no curly quotes)."""
    out = []
    for r in rows:
        out.append(tuple(v.replace("\u20ac", "E").replace("\u201c", "<").replace("\u201d", ">") if isinstance(v, str) else v for v in r))
    return out


def plain(rows):
    """Text without quotes, delimiters or line breaks (a dialect without quoting)."""
    return [tuple(v.replace('"', "").replace("|", "").replace("\n", " ").replace("\r", "") if isinstance(v, str) else v for v in r) for r in rows]


for vi, (name, dia, wo, dopts, how) in enumerate(V):
    rows = table(100 + vi)
    if wo.get("latin"):
        rows = latinize(rows)
    if wo.get("plain"):
        rows = plain(rows)
    if wo.get("pad"):  # trimmed fields: values without blanks of their own around them
        rows = [tuple(v.strip() if isinstance(v, str) else v for v in r) for r in rows]
        rows = [tuple((None if v == "" else v) for v in r) for r in rows]
    text = write_csv(rows, wo)
    enc = wo.get("encoding", "utf-8")
    raw = None
    if enc == "utf-16":
        raw = b"\xff\xfe" + text.encode("utf-16-le")
    elif enc == "utf-16-be-bom":
        raw = b"\xfe\xff" + text.encode("utf-16-be")
    else:
        raw = text.encode(enc)
    try:
        src, ds, r = ingest(name, text, dia, raw=raw)
        if r.returncode != 0:
            report(f"csv_dialect_{name}", False, "keel ingest: " + r.stderr[-800:])
            continue
        kr = keel_rows(ds)
        dpath, skip, header = src, 0, True
        if how:
            kind, skip = how
            alt = dict(wo)
            for k in ("encoding", "preamble", "pad", "latin"):
                alt.pop(k, None)
            if kind == "noheader":
                alt["header"] = False
                alt.pop("header_lines", None)
                alt["preamble"] = [wo.get("delim", ",").join(h) for h in wo["header_lines"]] if "header_lines" in wo else []
                header = False
            elif kind == "skip":
                alt["preamble"] = wo["preamble"]
            dpath = os.path.join(TMP, name + ".duck.csv")
            with open(dpath, "wb") as f:
                f.write(write_csv(rows, alt).encode("utf-8"))
            dopts = {k: v for k, v in dopts.items() if k != "encoding"}
        dr = duck_read(dpath, dopts, header=header, skip=skip)
        why = compare(kr, dr, names)
        if not why and len(kr) != len(rows):
            why = f"{len(kr)} rows, the table has {len(rows)}"
        report(f"csv_dialect_{name}", not why, why)
        # cut into 4 KiB chunks (the split must respect the dialect's quotes, escapes, comments, CR records): same rows
        ds4 = os.path.join(TMP, "ds4-" + name)
        r = keel("ingest", src, "--schema", os.path.join(TMP, name + ".yaml"), "--out", ds4, "--chunk-size", "4K")
        why = ("keel ingest --chunk-size 4K: " + r.stderr[-600:]) if r.returncode else compare(keel_rows(ds4), kr, names)
        report(f"csv_dialect_{name}_chunked", not why, why)
    except Exception as ex:  # a failure of one variant is that variant's FAIL
        report(f"csv_dialect_{name}", False, str(ex))

# ---- the chunk split respects comment lines: a comment's stray quote does not shift the quote parity ----
lines = ["id,name,price,qty,note"]
for i in range(1500):
    if i % 3 == 0:
        lines.append('# note: 5" screen, ' + str(i))
    lines.append(f'{i + 1},"line one\nline two {i}",{i}.5,{i},n')
src, ds, r = ingest("comment_quotes", "\n".join(lines) + "\n", {"comment": "#"})
ds4 = os.path.join(TMP, "ds4-comment_quotes")
r4 = keel("ingest", src, "--schema", os.path.join(TMP, "comment_quotes.yaml"), "--out", ds4, "--chunk-size", "4K")
why = r.stderr[-300:] + r4.stderr[-300:] if r.returncode or r4.returncode else compare(keel_rows(ds4), keel_rows(ds), names)
report("csv_dialect_comment_quotes_chunked", not why, why)

# ---- a stray quote inside an unquoted field does not shift the chunk split for the rest of the source ----
lines = ["id,name,price,qty,note"]
for i in range(1500):
    name = 'st"ray' if i == 2 else f'"line one\nline two {i}"'
    lines.append(f'{i + 1},{name},{i}.5,{i},n')
src = os.path.join(TMP, "stray.csv")
with open(src, "w") as f:
    f.write("\n".join(lines) + "\n")
with open(os.path.join(TMP, "stray.yaml"), "w") as f:
    f.write(schema_yaml({}))
for mode, want_rej in (("reject", 1), ("recover", 0)):
    r = keel("ingest", src, "--schema", os.path.join(TMP, "stray.yaml"), "--out", os.path.join(TMP, "ds-stray-" + mode),
             "--chunk-size", "4K", "--max-reject-ratio", "1", "--on-error", mode, "--json")
    try:
        res = json.loads(r.stdout)
        report(f"csv_dialect_stray_quote_chunked_{mode}", res["rows_rejected"] == want_rej and res["rows_accepted"] == 1500 - want_rej,
               r.stdout[-300:] + r.stderr[-300:])
    except Exception as ex:
        report(f"csv_dialect_stray_quote_chunked_{mode}", False, f"{ex}: {r.stderr[-300:]}")

# ---- --on-error recover: ragged rows and stray quotes, against DuckDB's null_padding / strict_mode=false ----
rows = table(7, n=60, text_chars=False)
lines = ["id,name,price,qty,note"]
expect_extra = []
for i, r in enumerate(rows):
    cells = [str(r[0]), r[1], repr(r[2]), str(r[3]), r[4] or ""]
    if i % 10 == 3:  # short: the last two fields missing
        cells = cells[:3]
        expect_extra.append(None)
    elif i % 10 == 5:  # long: two extra fields
        cells = cells + ["x1", "y2"]
        expect_extra.append("x1,y2")
    elif i % 10 == 7:  # a stray quote inside an unquoted field
        cells[1] = cells[1][:2] + '"' + cells[1][2:]
        expect_extra.append(None)
    else:
        expect_extra.append(None)
    lines.append(",".join(cells))
text = "\n".join(lines) + "\n"
src, ds, r = ingest("recover", text, {})
report("csv_dialect_recover_reject_default", r.returncode == 1 and "ragged" in r.stderr, r.stderr[-400:])
src, ds, r = ingest("recover", text, {}, args=("--on-error", "recover", "--json"))
try:
    res = json.loads(r.stdout)
    good = r.returncode == 0 and res["rows_rejected"] == 0 and res["rows_repaired"] == 18 and res["rows_accepted"] == 60
    report("csv_dialect_recover_loads_all", good, r.stdout[-400:] + r.stderr[-400:])
    kr = keel_rows(ds)
    dr = duck(f"SELECT * FROM read_csv({sql_str(src)}, auto_detect=false, header=true, delim=',', quote='\"', escape='\"', "
              "null_padding=true, strict_mode=false, allow_quoted_nulls=false, columns={"
              + ", ".join(f"'{n}': '{t}'" for n, _, t in COLS) + "})")
    why = compare(kr, dr, names)
    if not why:
        got = [x.get("_extra") for x in kr]
        why = "" if got == expect_extra else f"_extra {got[:12]}, expected {expect_extra[:12]}"
    report("csv_dialect_recover_matches_duckdb", not why, why)
    rej = [json.loads(x) for x in open(os.path.join(res["path"], "rejects.jsonl"))]
    kinds = sorted({(x["kind"], x.get("warning", False)) for x in rej})
    lines_ok = all(x["line"] == int(x["raw"].split(",")[0]) + 1 for x in rej)
    report("csv_dialect_recover_warnings", len(rej) == 18 and kinds == [("quote", True), ("ragged", True)] and lines_ok
           and all("repair" in x for x in rej), json.dumps(rej[:3]))
except Exception as ex:
    report("csv_dialect_recover_loads_all", False, f"{ex}: {r.stdout[-300:]} {r.stderr[-300:]}")
# validation still applies after repair: a short row in a non-nullable column is a null reject
sch = os.path.join(TMP, "recover_nn.yaml")
with open(sch, "w") as f:
    f.write("columns:\n  - {name: a, type: int64}\n  - {name: b, type: int64, nullable: false}\n")
src = os.path.join(TMP, "recover_nn.csv")
with open(src, "w") as f:
    f.write("a,b\n1,2\n3\n4,x\n")
r = keel("ingest", src, "--schema", sch, "--out", os.path.join(TMP, "ds-nn"), "--on-error", "recover", "--max-reject-ratio", "1", "--json")
try:
    res = json.loads(r.stdout)
    rej = [json.loads(x) for x in open(os.path.join(res["path"], "rejects.jsonl"))]
    report("csv_dialect_recover_validates", res["rows_accepted"] == 1 and res["rows_rejected"] == 2 and
           [(x["line"], x["kind"], bool(x.get("warning"))) for x in rej] == [(3, "ragged", True), (3, "null", False), (4, "type", False)],
           json.dumps(rej))
except Exception as ex:
    report("csv_dialect_recover_validates", False, f"{ex}: {r.stdout[-300:]} {r.stderr[-300:]}")
r = keel("ingest", src, "--schema", sch, "--out", os.path.join(TMP, "ds-fail"), "--on-error", "fail", "--max-reject-ratio", "1")
report("csv_dialect_on_error_fail", r.returncode == 1 and "recover_nn.csv:3:" in r.stderr and "--on-error fail" in r.stderr
       and not os.path.exists(os.path.join(TMP, "ds-fail", "current")), r.stderr[-400:])

# ---- header names normalised; the manifest keeps the header's own names ----
src = os.path.join(TMP, "names.csv")
with open(src, "w") as f:
    f.write("a,a,,b\n1,2,3,4\n5,6,7,8\n")
r = keel("schema", "infer", src, "--out", os.path.join(TMP, "names.yaml"))
y = open(os.path.join(TMP, "names.yaml")).read() if r.returncode == 0 else r.stderr
report("csv_dialect_infer_names_normalised", all(f'name: "{n}"' in y for n in ("a", "a_2", "column_3", "b")), y[-600:])
r = keel("ingest", src, "--schema", os.path.join(TMP, "names.yaml"), "--out", os.path.join(TMP, "ds-names"), "--json")
try:
    res = json.loads(r.stdout)
    man = json.load(open(os.path.join(res["path"], "manifest.json")))
    hn = man["sources"][0].get("header_names")
    report("csv_dialect_manifest_keeps_names", hn == {"a_2": "a", "column_3": ""} and keel_rows(os.path.join(TMP, "ds-names"))[1]
           == {"a": 5, "a_2": 6, "column_3": 7, "b": 8}, json.dumps(man["sources"]))
except Exception as ex:
    report("csv_dialect_manifest_keeps_names", False, f"{ex}: {r.stderr[-300:]}")

# ---- schema infer sniffs each variant's dialect back; the sniffed schema reads the same rows ----
SNIFF = {"semicolon_decimal_comma": {"decimal": ",", "thousands": "."}, "tab": {"delimiter": "\t"}, "comma_space": {"delimiter": ", "},
         "double_pipe": {"delimiter": "||"}, "backslash_escape": {"escape": "\\"}, "apostrophe_quote": {"quote": "'"},
         "cr_only": {"line_terminator": "cr"}, "crlf": {"# line endings": "CRLF"}, "preamble": {"skip_rows": 3},
         "no_header": {"header": "false"}, "header_rows_2": {"header_rows": "2"}, "utf16le": {"encoding": "utf-16le"},
         "utf16be_bom": {"encoding": "utf-16be"}, "windows1252": {"encoding": "windows-1252"}}
for name, want in SNIFF.items():
    if want is None:
        continue
    src = os.path.join(TMP, name + ".csv")
    out = os.path.join(TMP, name + ".sniffed.yaml")
    r = keel("schema", "infer", src, "--out", out)
    if r.returncode != 0:
        report(f"csv_dialect_sniff_{name}", False, r.stderr[-400:])
        continue
    y = open(out).read()
    missing = [f"{k}: {v}" for k, v in want.items() if not any(
        line.strip() in (f"{k}: {json.dumps(v)}", f"{k}: {v}") or line.strip().startswith(f"{k}: {v} ") for line in y.splitlines())]
    if "# sniffed:" not in y or "confidence" not in y:
        missing.append("the evidence comment")
    report(f"csv_dialect_sniff_{name}", not missing, f"missing {missing}:\n{y[:900]}")
    # the sniffed schema reads the same cells as the given dialect did
    ds2 = os.path.join(TMP, "ds-sniffed-" + name)
    r = keel("ingest", src, "--schema", out, "--out", ds2)
    if r.returncode != 0:
        report(f"csv_dialect_sniffed_ingest_{name}", False, r.stderr[-500:])
        continue
    a, b = keel_rows(os.path.join(TMP, "ds-" + name)), keel_rows(ds2)
    if name == "no_header":  # by position: the sniffed names are column_1..5
        b = [{n: row[f"column_{i + 1}"] for i, n in enumerate(names)} for row in b]
    if name == "header_rows_2":
        b = [{n: row[n] for n in names} for row in b]
    why = compare(a, b, names)
    report(f"csv_dialect_sniffed_ingest_{name}", not why, why)

sys.exit(1 if rep.failed else 0)
