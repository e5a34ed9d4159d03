#!/usr/bin/env python3
"""Parquet interoperability with DuckDB 1.5 (the oracle, npm @duckdb/node-api
installed into build/npm) and hyparquet (a second, pure-JavaScript reader):
both read every file keel writes with identical values, nulls and row counts; keel reads DuckDB-written files identically;
keel reads every file of parquet-testing/data like DuckDB does (nested
columns compared as JSON values; counts of files read and refused printed);
every file of parquet-testing/bad_data gives a clear error, never a crash.
Prints PASS/FAIL lines. A missing DuckDB is a FAIL, never a skip."""
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylib"))
import duckdb_npm  # noqa: E402
import report as rep  # noqa: E402
from report import report  # noqa: E402

SRC = os.environ.get("KEEL_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.path.join(SRC, os.environ.get("BUILD", "build"))
TOOL = os.path.join(BUILD, "parquet-tool")
TESTDATA = os.path.join(SRC, "tests", "data", "parquet-testing")
NPM = os.path.join(SRC, "build", "npm")
JS = os.path.join(SRC, "tests", "integration", "parquet_duckdb.mjs")
HYP_JS = os.path.join(SRC, "tests", "integration", "parquet_hyparquet.mjs")
TMP = tempfile.mkdtemp(prefix="pq-", dir=os.environ.get("KEEL_TEST_TMP"))


def ensure_duckdb():
    return duckdb_npm.ensure_duckdb(NPM)


def duck(*args):
    env = dict(os.environ, DUCKDB_NODE_PATH=os.path.join(NPM, "node_modules"))
    r = subprocess.run(["node", JS, *args], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("duckdb: " + r.stderr[-800:])
    return [json.loads(l) for l in r.stdout.splitlines() if l.strip()]


def hyparquet(*files):
    env = dict(os.environ, HYPARQUET_NODE_PATH=os.path.join(NPM, "node_modules"))
    r = subprocess.run(["node", HYP_JS, "dump", *files], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("hyparquet: " + r.stderr[-800:])
    return {g["file"]: g for g in (json.loads(l) for l in r.stdout.splitlines() if l.strip())}


def keel(*args):
    r = subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=600)
    if r.returncode < 0 or r.returncode > 2:
        raise RuntimeError(f"parquet-tool {args[0]} crashed (status {r.returncode}): {r.stderr[-500:]}")
    return r, [json.loads(l) for l in r.stdout.splitlines() if l.strip()]


def norm(v):
    if isinstance(v, bool) or v is None:
        return v
    return v


def same(a, b):
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b) and isinstance(a, bool) == isinstance(b, bool)
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    if isinstance(a, str) or isinstance(b, str):
        return False
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    a, b = float(a), float(b)
    if a == b:
        return True
    return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))


def norm_ts(s):
    """'2021-01-01T00:00:00Z' (keel) and '2021-01-01 00:00:00' (DuckDB's to_json) → one form."""
    s = s.replace("T", " ")
    for z in ("Z", "+00:00", "+00"):
        if s.endswith(z):
            s = s[: -len(z)]
    return s.rstrip("0").rstrip(".") if "." in s else s


def same_json(a, b):
    """Values of nested columns: JSON texts equal as JSON values."""
    if isinstance(a, dict) and isinstance(b, dict):
        return sorted(a) == sorted(b) and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, str) and isinstance(b, str):
        return a == b or norm_ts(a) == norm_ts(b)
    return same(a, b)


def compare(exp, got, label):
    """exp: expected dump (JSON), got: the other side. Compares the columns of exp."""
    if not got.get("ok"):
        return f"{label}: read failed: {got.get('error')}"
    if exp["rows"] != got["rows"]:
        return f"{label}: {got['rows']} rows, expected {exp['rows']}"
    gcols = {c["name"]: i for i, c in enumerate(got["columns"])}
    for j, c in enumerate(exp["columns"]):
        if c["name"] not in gcols:
            return f"{label}: column {c['name']} missing (have {list(gcols)})"
        gv = got["data"][gcols[c["name"]]]
        ev = exp["data"][j]
        if len(gv) != len(ev):
            return f"{label}: column {c['name']}: {len(gv)} values, expected {len(ev)}"
        js = c.get("type") == "json"
        for i, (x, y) in enumerate(zip(ev, gv)):
            if js and isinstance(x, str) and isinstance(y, str):
                try:
                    ok = same_json(json.loads(x), json.loads(y))
                except ValueError:
                    ok = False
            else:
                ok = same(x, y)
            if not ok:
                return f"{label}: column {c['name']} row {i}: {y!r}, expected {x!r}"
    return None


def keel_writes():
    """DuckDB and hyparquet read what keel writes, list and struct columns included."""
    cases = []
    for codec in ["none", "snappy", "gzip", "zstd", "lz4_raw"]:
        for d in ("1", "0"):
            cases.append((f"{codec}_dict{d}", ["--codec", codec, "--dict", d, "--rows", "2500"]))
    cases.append(("zstd_v2_pages", ["--codec", "zstd", "--v2", "--rows", "2500", "--page-bytes", "2000"]))
    cases.append(("snappy_v2_plain", ["--codec", "snappy", "--v2", "--dict", "0", "--rows", "2500"]))
    cases.append(("rowgroups_smallpages", ["--rows", "5000", "--rg-rows", "1200", "--page-bytes", "1000"]))
    cases.append(("empty", ["--rows", "0"]))
    # list columns (3-level LIST, FixedSizeList): every codec, v1 and v2 pages, small pages so
    # that long lists span several of them, several row groups, and a file of no rows
    for codec in ["none", "snappy", "gzip", "zstd", "lz4_raw"]:
        cases.append((f"lists_{codec}", ["--lists", "--codec", codec, "--rows", "1500"]))
    cases.append(("lists_v2_smallpages", ["--lists", "--v2", "--rows", "2500", "--page-bytes", "700", "--rg-rows", "900"]))
    cases.append(("lists_v1_smallpages", ["--lists", "--rows", "2500", "--page-bytes", "700", "--rg-rows", "900"]))
    cases.append(("lists_empty", ["--lists", "--rows", "0"]))
    # struct columns (a group of optional fields), with lists, dictionary and plain, v1 and v2
    cases.append(("structs_zstd", ["--structs", "--lists", "--rows", "2500", "--rg-rows", "1000", "--page-bytes", "900"]))
    cases.append(("structs_v2_plain", ["--structs", "--v2", "--dict", "0", "--codec", "snappy", "--rows", "2500"]))
    cases.append(("structs_gzip_v2", ["--structs", "--v2", "--codec", "gzip", "--rows", "1200"]))
    files, expected = [], {}
    for name, args in cases:
        path = os.path.join(TMP, f"keel_{name}.parquet")
        r, out = keel("write", path, *args)
        if r.returncode != 0 or not out:
            report(f"parquet_keel_writes_{name}", False, r.stderr[-400:])
            continue
        expected[path] = (name, out[0])
        files.append(path)
    got = {g["file"]: g for g in duck("dump", *files)} if files else {}
    ok, hwhy = duckdb_npm.ensure_hyparquet(NPM)
    report("parquet_hyparquet_available", ok, hwhy)
    hyp = hyparquet(*files) if files and ok else {}
    for path in files:
        name, exp = expected[path]
        why = compare(exp, got.get(path, {"ok": False, "error": "no output"}), f"DuckDB reading keel {name}")
        if why is None:
            why = compare(exp, hyp.get(path, {"ok": False, "error": "no output"}), f"hyparquet reading keel {name}")
        if why is None:  # keel reads its own file too
            _, mine = keel("dump", path)
            why = compare(exp, mine[0], f"keel reading keel {name}")
        report(f"parquet_keel_writes_{name}", why is None, why or "")


DUCK_TABLE = """CREATE TABLE t AS SELECT
  i::INTEGER AS i32,
  CASE WHEN i % 7 = 0 THEN NULL ELSE i * 1000003 - 2000000000 END::BIGINT AS i64n,
  (i * 0.25 - 100)::DOUBLE AS f64,
  CASE WHEN i % 5 = 0 THEN NULL ELSE (i / 3.0)::FLOAT END AS f32n,
  'str' || (i % 13) AS s,
  CASE WHEN i % 3 = 0 THEN NULL ELSE 'value number ' || i END AS sn,
  DATE '2020-01-01' + (i % 1000)::INTEGER AS d,
  CASE WHEN i % 4 = 1 THEN NULL ELSE TIMESTAMP '2021-01-01' + INTERVAL (i * 7919) SECOND END AS tsn,
  (TIMESTAMPTZ '2022-06-01 00:00:00+00' + INTERVAL (i) MINUTE) AS tstz,
  (i % 2 = 0) AS b,
  CASE WHEN i % 11 = 0 THEN NULL ELSE i % 3 = 1 END AS bn,
  ((i % 1000) / 100.0)::DECIMAL(9,2) AS dec9,
  (i * 12345.678)::DECIMAL(18,3) AS dec18,
  (i % 5)::TINYINT AS tiny,
  (i % 300)::SMALLINT AS small
FROM range(5000) t(i)"""


def duck_writes():
    """keel reads what DuckDB writes."""
    cases = {
        "zstd": "COMPRESSION zstd",
        "snappy": "COMPRESSION snappy",
        "gzip": "COMPRESSION gzip",
        "uncompressed": "COMPRESSION uncompressed",
        "lz4_raw": "COMPRESSION lz4_raw",
        "plain_zstd": "COMPRESSION zstd, DICTIONARY_SIZE_LIMIT 1",
        "rowgroups": "COMPRESSION zstd, ROW_GROUP_SIZE 1000",
        "v2_zstd": "COMPRESSION zstd, PARQUET_VERSION V2",
        "v2_snappy_rowgroups": "COMPRESSION snappy, PARQUET_VERSION V2, ROW_GROUP_SIZE 700",
        "v2_plain_gzip": "COMPRESSION gzip, PARQUET_VERSION V2, DICTIONARY_SIZE_LIMIT 1",
    }
    stmts, files = [DUCK_TABLE], {}
    for name, opts in cases.items():
        path = os.path.join(TMP, f"duck_{name}.parquet")
        stmts.append(f"COPY t TO '{path}' (FORMAT parquet, {opts})")
        files[path] = name
    duck("sql", *stmts)
    exp = {g["file"]: g for g in duck("dump", *files)}
    for path, name in files.items():
        e = exp[path]
        if not e.get("ok"):
            report(f"parquet_reads_duckdb_{name}", False, "DuckDB cannot read its own file: " + e.get("error", ""))
            continue
        _, mine = keel("dump", path)
        why = compare(e, mine[0], f"keel reading DuckDB {name}")
        report(f"parquet_reads_duckdb_{name}", why is None, why or "")


def nested_columns():
    """Nested columns read as JSON text, identical to DuckDB's to_json; the
    flat columns of the same file read by projection; a leaf inside a nested
    column is refused naming the column to select instead."""
    path = os.path.join(TMP, "duck_nested.parquet")
    duck("sql", f"COPY (SELECT i::INTEGER AS id, {{'a': i, 'b': 'x' || i}} AS st, [i, i + 1] AS lst, "
                f"'s' || (i % 7) AS s FROM range(3000) t(i)) TO '{path}' (FORMAT parquet)")
    exp = duck("dump", path)[0]
    _, mine = keel("dump", path)
    m = mine[0]
    why = None if m.get("ok") else f"keel: {m.get('error')}"
    if why is None and [c["name"] for c in m["columns"]] != ["id", "st", "lst", "s"]:
        why = f"columns {[c['name'] for c in m['columns']]}, expected id, st, lst, s"
    if why is None:
        why = compare(exp, m, "keel vs DuckDB (a nested file)")
    report("parquet_nested_columns_read", why is None, why or "")
    _, mine = keel("dump", path, "--cols", "s,id")
    m = mine[0]
    e2 = dict(exp, columns=[exp["columns"][3], exp["columns"][0]], data=[exp["data"][3], exp["data"][0]])
    why = compare(e2, m, "keel vs DuckDB (flat columns of a nested file)") if m.get("ok") else f"keel: {m.get('error')}"
    report("parquet_nested_flat_columns", why is None, why or "")
    r, out = keel("dump", path, "--cols", "id,lst.list.element")
    err = out[0].get("error", "") if out else r.stderr
    report("parquet_nested_unsupported_error", r.returncode == 1 and "nested" in err and "lst" in err,
           f"status {r.returncode}: {err[:300]}")


def testing_files():
    d = os.path.join(TESTDATA, "data")
    if not os.path.isdir(d):
        report("parquet_testing_data", False, f"{d} is missing")
        return
    files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".parquet"))
    exp = {g["file"]: g for g in duck("dump", *files)}
    read, refused = [], []
    for f in files:
        name = os.path.basename(f)
        r, mine = keel("dump", f)
        m = mine[0] if mine else {"ok": False, "error": r.stderr}
        e = exp.get(f, {"ok": False, "error": "no DuckDB output"})
        if "corrupt-checksum" in name:
            # DuckDB does not verify page CRCs; keel does and must refuse the file
            report(f"parquet_testing_{name}", not m.get("ok") and "CRC mismatch" in m.get("error", ""),
                   f"expected a CRC error, got {str(m)[:300]}")
            continue
        if name.startswith("byte_stream_split_extended"):
            # DuckDB 1.5 reads BYTE_STREAM_SPLIT only for FLOAT/DOUBLE: compare each
            # *_byte_stream_split column with its PLAIN twin instead
            why = None if m.get("ok") else f"keel: {m.get('error')}"
            cols = {c["name"]: j for j, c in enumerate(m.get("columns", []))}
            pairs = [(n, n.replace("_byte_stream_split", "_plain")) for n in cols if n.endswith("_byte_stream_split")]
            if why is None and len(pairs) < 5:
                why = f"only {len(pairs)} byte_stream_split columns: {list(cols)}"
            for a, b in pairs if why is None else []:
                if b not in cols or m["data"][cols[a]] != m["data"][cols[b]]:
                    why = f"column {a} differs from {b}"
                    break
            report(f"parquet_testing_{name}", why is None, why or "")
            continue
        if not e.get("ok"):
            # DuckDB refuses the file (corrupt checksums ...): keel must refuse it too, cleanly
            report(f"parquet_testing_{name}", not m.get("ok"), f"DuckDB fails ({e.get('error', '')[:200]}) but keel reads it")
            continue
        if not m.get("ok"):
            # refused: only with a reason that names what is not supported
            err = m.get("error", "")
            refused.append(name)
            report(f"parquet_testing_{name}", "not supported" in err, f"keel: {err}")
            continue
        # every column: those keel cannot read must be named with the reason
        unsup = dict(zip(m.get("unsupported", []), m.get("why", [])))
        if unsup:
            refused.append(name)
            report(f"parquet_testing_{name}", all("not supported" in w or "at most" in w for w in unsup.values()),
                   f"unreadable columns without a reason: {unsup}")
            continue
        why = compare(e, m, "keel vs DuckDB")
        if why is None:
            read.append(name)
        report(f"parquet_testing_{name}", why is None, why or "")
    print(f"parquet-testing data/: {len(files)} files, {len(read)} read exactly like DuckDB, "
          f"{len(refused)} refused naming the feature{': ' + ', '.join(refused) if refused else ''}", flush=True)


def bad_files():
    """bad_data/: keel never crashes; it gives a clear error, or (for files DuckDB
    reads, e.g. a legal zero bit width) exactly DuckDB's values."""
    d = os.path.join(TESTDATA, "bad_data")
    files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".parquet")) if os.path.isdir(d) else []
    if not files:
        report("parquet_bad_data", False, f"no files in {d}")
        return
    exp = {g["file"]: g for g in duck("dump", *files)}
    for f in files:
        name = os.path.basename(f)
        try:
            r, out = keel("dump", f)
        except RuntimeError as ex:
            report(f"parquet_bad_{name}", False, str(ex))
            continue
        m = out[0] if out else {}
        if r.returncode == 1 and not m.get("ok") and m.get("error"):
            report(f"parquet_bad_{name}", True)
            continue
        e = exp.get(f, {})
        if r.returncode == 0 and m.get("ok") and e.get("ok") and e["columns"]:
            why = compare(e, m, "keel vs DuckDB")
            report(f"parquet_bad_{name}", why is None, why or "")
            continue
        report(f"parquet_bad_{name}", False, f"expected a clean error, got status {r.returncode}: {r.stdout[:300]}")


def main():
    ok, why = ensure_duckdb()
    report("parquet_duckdb_available", ok, why)
    if not ok:
        return 1
    if not os.access(TOOL, os.X_OK):
        report("parquet_tool_built", False, f"{TOOL} missing (make)")
        return 1
    for fn in (keel_writes, duck_writes, nested_columns, testing_files, bad_files):
        try:
            fn()
        except Exception as ex:
            report(f"parquet_{fn.__name__}", False, f"{type(ex).__name__}: {ex}")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
