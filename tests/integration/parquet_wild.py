#!/usr/bin/env python3
"""Parquet files as other tools write them, read through `keel data
head/show/stats` and compared with DuckDB 1.5 (npm @duckdb/node-api in
build/npm; a missing DuckDB is a FAIL): nested columns (LIST, MAP, STRUCT,
arbitrarily nested, nulls and empty lists at every level) printed as JSON
values equal to DuckDB's to_json; unsigned integers above 2^63; binary
columns (base64, never cut at a zero byte) and UUIDs (canonical); every
flat type DuckDB writes (decimals of every width, timestamps of every unit,
INTERVAL, unsigned integers) against DuckDB's to_json; BROTLI;
and a column keel cannot read is never left out silently (head and stats
fail naming it unless --skip-unreadable, show marks it). Prints PASS/FAIL."""
import base64
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylib"))
import duckdb_npm  # noqa: E402
import report as rep  # noqa: E402
from report import report  # noqa: E402

SRC = os.environ.get("KEEL_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
KEEL = os.environ.get("KEEL", os.path.join(SRC, os.environ.get("BUILD", "build"), "keel"))
NPM = os.path.join(SRC, "build", "npm")
JS = os.path.join(SRC, "tests", "integration", "parquet_duckdb.mjs")
TMP = tempfile.mkdtemp(prefix="pqw-", dir=os.environ.get("KEEL_TEST_TMP"))


def duck(*args):
    env = dict(os.environ, DUCKDB_NODE_PATH=os.path.join(NPM, "node_modules"))
    r = subprocess.run(["node", JS, *args], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("duckdb: " + r.stderr[-800:])
    return [json.loads(l) for l in r.stdout.splitlines() if l.strip()]


def keel(*args):
    r = subprocess.run([KEEL, *args], capture_output=True, text=True, timeout=600)
    if r.returncode < 0:
        raise RuntimeError(f"keel {' '.join(args[:2])} crashed (signal {-r.returncode}): {r.stderr[-400:]}")
    return r


def head_rows(path, *extra):
    r = keel("data", "head", path, "--json", "-n", "1000000", *extra)
    if r.returncode != 0:
        return None, r.stderr.strip()
    try:
        return [json.loads(l) for l in r.stdout.splitlines() if l.strip()], ""
    except ValueError as ex:
        return None, f"not JSON ({ex}): {r.stdout[:300]!r}"


def norm_ts(s):
    """'2021-01-01T00:00:00Z' / '2021-01-01 00:00:00' / '...+00' → one form."""
    s = s.replace("T", " ")
    for z in ("Z", "+00:00", "+00"):
        if s.endswith(z):
            s = s[: -len(z)]
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def f32(x):
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def same(a, b, path="$"):
    """None when the JSON values a (DuckDB) and b (keel) agree, else where they differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        if sorted(a) != sorted(b):
            return f"{path}: keys {sorted(b)}, expected {sorted(a)}"
        for k in a:
            w = same(a[k], b[k], f"{path}.{k}")
            if w:
                return w
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(b)} elements, expected {len(a)}"
        for i, (x, y) in enumerate(zip(a, b)):
            w = same(x, y, f"{path}[{i}]")
            if w:
                return w
        return None
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return None if a is b or a == b and type(a) is type(b) else f"{path}: {b!r}, expected {a!r}"
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if a == b or abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b)):
            return None
        if isinstance(a, float) and abs(a) < 3e38 and f32(a) == f32(b):  # a FLOAT printed shortest vs widened
            return None
        return f"{path}: {b!r}, expected {a!r}"
    if isinstance(a, str) and isinstance(b, str):
        return None if a == b or norm_ts(a) == norm_ts(b) else f"{path}: {b!r}, expected {a!r}"
    return f"{path}: {b!r}, expected {a!r}"


def compare_rows(path, label, extra=()):
    """keel data head --json of path against DuckDB's to_json of every row."""
    exp = duck("json", path)[0]
    if not exp.get("ok"):
        return f"DuckDB: {exp.get('error')}"
    got, err = head_rows(path, *extra)
    if got is None:
        return f"keel: {err}"
    if len(got) != len(exp["rows"]):
        return f"{len(got)} rows, expected {len(exp['rows'])}"
    for i, (x, y) in enumerate(zip(exp["rows"], got)):
        w = same(x, y, f"row {i}")
        if w:
            return f"{label}: {w}"
    return None


NESTED = """COPY (SELECT i::INTEGER AS id,
  CASE WHEN i % 5 = 0 THEN NULL ELSE {'a': i, 'b': 'x' || i, 'c': CASE WHEN i % 3 = 0 THEN NULL ELSE i * 0.5 END} END AS st,
  CASE WHEN i % 7 = 0 THEN NULL WHEN i % 7 = 1 THEN [] ELSE [i, NULL, i + 1] END AS lst,
  CASE WHEN i % 4 = 0 THEN [] ELSE [[i], [], NULL, [i, i * 2]] END AS lol,
  CASE WHEN i % 6 = 0 THEN NULL ELSE MAP {'k' || i: i, 'z': NULL} END AS mp,
  [{'p': i, 'q': ['a', NULL]}, NULL, {'p': NULL, 'q': []}] AS los,
  {'inner': {'deep': [i % 3 = 0, NULL]}, 'n': CASE WHEN i % 2 = 0 THEN NULL ELSE 'n' END} AS sos,
  'flat' || (i % 9) AS s
FROM range(3000) t(i)) TO '{path}' (FORMAT parquet{opts})"""


def nested():
    cases = {"v1": "", "v2_zstd_rowgroups": ", PARQUET_VERSION V2, COMPRESSION zstd, ROW_GROUP_SIZE 700",
             "snappy_plain": ", COMPRESSION snappy, DICTIONARY_SIZE_LIMIT 1"}
    for name, opts in cases.items():
        path = os.path.join(TMP, f"nested_{name}.parquet")
        duck("sql", NESTED.replace("{path}", path).replace("{opts}", opts))
        why = compare_rows(path, f"nested {name}")
        report(f"parquet_wild_nested_{name}", why is None, why or "")
    path = os.path.join(TMP, "nested_v1.parquet")
    r = keel("data", "stats", path, "--json")
    why = None
    try:
        cols = {c["name"]: c for c in json.loads(r.stdout)["columns"]} if r.returncode == 0 else {}
        if r.returncode != 0:
            why = r.stderr[-300:]
        elif sorted(cols) != sorted(["id", "st", "lst", "lol", "mp", "los", "sos", "s"]):
            why = f"columns {sorted(cols)}"
        elif cols["st"]["nulls"] != 600 or cols["lst"]["nulls"] != 429 or cols["st"]["rows"] != 3000:
            why = f"st {cols['st']}, lst {cols['lst']}"
    except ValueError as ex:
        why = f"not JSON: {ex}"
    report("parquet_wild_nested_stats", why is None, why or "")
    r = keel("data", "show", path)
    lines = {l.split()[0]: l for l in r.stdout.splitlines() if l.startswith("  ")}
    ok = r.returncode == 0 and "not readable" not in r.stdout and all(
        c in lines and " json " in lines[c] for c in ("st", "lst", "lol", "mp", "los", "sos"))
    why = None if ok else r.stdout + r.stderr
    report("parquet_wild_nested_show", why is None, (why or "")[-400:])


def unreadable():
    """A column keel cannot read (nesting deeper than its limit) is named, never left out."""
    deep = "i"
    for _ in range(20):
        deep = f"[{deep}]"
    path = os.path.join(TMP, "deep.parquet")
    duck("sql", f"COPY (SELECT i::INTEGER AS id, {deep} AS deep, 's' || i AS s FROM range(10) t(i)) TO '{path}' (FORMAT parquet)")
    r = keel("data", "head", path)
    report("parquet_wild_unreadable_head_fails", r.returncode == 1 and "deep" in r.stderr and "--skip-unreadable" in r.stderr,
           f"status {r.returncode}: {r.stdout[:200]} {r.stderr[:300]}")
    r = keel("data", "head", path, "--skip-unreadable", "--json")
    ok = r.returncode == 0 and "deep" in r.stderr and "skipped" in r.stderr
    try:
        rows = [json.loads(l) for l in r.stdout.splitlines()]
        ok = ok and len(rows) == 10 and sorted(rows[0]) == ["id", "s"]
    except ValueError:
        ok = False
    report("parquet_wild_unreadable_head_skip", ok, f"status {r.returncode}: {r.stdout[:200]} {r.stderr[:300]}")
    r = keel("data", "stats", path)
    report("parquet_wild_unreadable_stats_fails", r.returncode == 1 and "deep" in r.stderr,
           f"status {r.returncode}: {r.stdout[:200]} {r.stderr[:300]}")
    r = keel("data", "show", path)
    line = [l for l in r.stdout.splitlines() if l.strip().startswith("deep")]
    report("parquet_wild_unreadable_show", r.returncode == 0 and line and "not readable" in line[0],
           f"status {r.returncode}: {r.stdout[-400:]}")
    r = keel("data", "show", path, "--json")
    ok = False
    try:
        cols = {c["name"]: c for c in json.loads(r.stdout)["columns"]}
        ok = cols["deep"]["readable"] is False and "nest" in cols["deep"]["why"] and cols["id"]["readable"] is True
    except (ValueError, KeyError) as ex:
        ok = False
    report("parquet_wild_unreadable_show_json", ok, r.stdout[-400:])


def unsigned_binary():
    path = os.path.join(TMP, "types.parquet")
    duck("sql", f"""COPY (SELECT * FROM (VALUES
        (18446744073709551615::UBIGINT, 255::UTINYINT, 65535::USMALLINT, 4294967295::UINTEGER,
         '\\x00\\x01ab\\x00c'::BLOB, '6ba7b810-9dad-11d1-80b4-00c04fd430c8'::UUID, 'ok'),
        (9223372036854775808::UBIGINT, 0::UTINYINT, 1::USMALLINT, 2147483648::UINTEGER,
         '\\xFF\\xFE'::BLOB, '00000000-0000-0000-0000-000000000001'::UUID, 'x\\y'),
        (NULL, NULL, NULL, NULL, NULL, NULL, NULL)) t(u64, u8, u16, u32, b, u, s)) TO '{path}' (FORMAT parquet)""")
    got, err = head_rows(path)
    exp = [{"u64": 18446744073709551615, "u8": 255, "u16": 65535, "u32": 4294967295,
            "b": base64.b64encode(b"\x00\x01ab\x00c").decode(), "u": "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "s": "ok"},
           {"u64": 9223372036854775808, "u8": 0, "u16": 1, "u32": 2147483648,
            "b": base64.b64encode(b"\xff\xfe").decode(), "u": "00000000-0000-0000-0000-000000000001", "s": "x\\y"},
           {"u64": None, "u8": None, "u16": None, "u32": None, "b": None, "u": None, "s": None}]
    report("parquet_wild_unsigned_binary_head", got == exp, f"{err} got {got}")
    r = keel("data", "head", path)
    ok = r.returncode == 0 and "18446744073709551615" in r.stdout and "AAFhYgBj" in r.stdout and "\x00" not in r.stdout \
        and "\xff" not in r.stdout and "6ba7b810-9dad-11d1-80b4-00c04fd430c8" in r.stdout
    report("parquet_wild_unsigned_binary_text", ok, repr(r.stdout[:400]) + r.stderr[-200:])
    r = keel("data", "stats", path, "--json")
    ok = False
    try:
        cols = {c["name"]: c for c in json.loads(r.stdout)["columns"]}
        ok = str(cols["u64"]["min"]) == "9223372036854775808" and str(cols["u64"]["max"]) == "18446744073709551615"
    except (ValueError, KeyError):
        pass
    report("parquet_wild_unsigned_stats", ok, r.stdout[-400:] + r.stderr[-200:])


TYPES = """COPY (SELECT (i - 100)::TINYINT AS i8, (i * 300 - 30000)::SMALLINT AS i16, (i * 70000 - 7000000)::INTEGER AS i32, (i * 5000000000)::BIGINT AS i64,
  i::UTINYINT AS u8, (i * 300)::USMALLINT AS u16, (i * 21000000)::UINTEGER AS u32, (18446744073709551615 - i)::UBIGINT AS u64,
  (i / 7)::FLOAT AS f32, (i / 7)::DOUBLE AS f64, i % 2 = 0 AS b, 'v' || i AS s,
  (i * 0.25)::DECIMAL(4,2) AS d4, (i * 12345.678)::DECIMAL(18,3) AS d18, (i * 123456789012.3456789)::DECIMAL(38,7) AS d38,
  DATE '2020-02-28' + i::INTEGER AS dt, TIMESTAMP '2021-01-01 00:00:00' + INTERVAL (i * 7919) SECOND AS ts,
  TIMESTAMPTZ '2022-06-01 00:00:00+00' + INTERVAL (i) MINUTE AS tstz,
  (TIMESTAMP '2023-03-03 03:03:03' + INTERVAL (i) MICROSECOND)::TIMESTAMP_NS AS tsns,
  TIMESTAMP_MS '2020-01-01 00:00:00.123' + INTERVAL (i) SECOND AS tsms,
  INTERVAL (i) DAY + INTERVAL (i * 1001) MILLISECOND + INTERVAL (i % 3) MONTH AS iv,
  CASE WHEN i % 3 = 0 THEN NULL ELSE uuid() END AS uid
FROM range(200) t(i)) TO '{path}' (FORMAT parquet{opts})"""


def types():
    """Flat types DuckDB writes, every row against DuckDB's to_json (blobs: unsigned_binary)."""
    for name, opts in {"v1": "", "v2_plain": ", PARQUET_VERSION V2, DICTIONARY_SIZE_LIMIT 1, COMPRESSION gzip"}.items():
        path = os.path.join(TMP, f"types_{name}.parquet")
        duck("sql", TYPES.replace("{path}", path).replace("{opts}", opts))
        why = compare_rows(path, f"types {name}")
        report(f"parquet_wild_types_{name}", why is None, why or "")


def brotli():
    path = os.path.join(TMP, "brotli.parquet")
    duck("sql", f"COPY (SELECT i::BIGINT AS i, 'v' || (i % 17) AS s, [i, i + 1] AS l FROM range(5000) t(i)) "
                f"TO '{path}' (FORMAT parquet, COMPRESSION brotli)")
    why = compare_rows(path, "brotli")
    report("parquet_wild_brotli", why is None, why or "")


def main():
    ok, why = duckdb_npm.ensure_duckdb(NPM)
    report("parquet_wild_duckdb_available", ok, why)
    if not ok:
        return 1
    for fn in (unreadable, unsigned_binary, types, nested, brotli):
        try:
            fn()
        except Exception as ex:
            report(f"parquet_wild_{fn.__name__}", False, f"{type(ex).__name__}: {ex}")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
