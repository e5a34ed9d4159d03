"""keel ingest output read by DuckDB 1.5 (npm @duckdb/node-api in build/npm):
every dataset keel publishes (codecs zstd/snappy/gzip/none, partitioned by a
timestamp's day or a category, and not) holds exactly the rows of the source
CSV as DuckDB reads it: same values, same nulls, same row count."""
import json
import os
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
TMP = tempfile.mkdtemp(prefix="ingest-duck-", dir=os.environ.get("KEEL_TEST_TMP"))


def ensure_duckdb():
    return duckdb_npm.ensure_duckdb(NPM)


def duck(sql):
    env = dict(os.environ, DUCKDB_NODE_PATH=os.path.join(NPM, "node_modules"))
    r = subprocess.run(["node", JS, "query", sql], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("duckdb: " + r.stderr[-800:])
    return json.loads(r.stdout)


def keel(*args):
    return subprocess.run([KEEL, *args], capture_output=True, text=True, timeout=600)


ok, why = ensure_duckdb()
report("ingest_duckdb_available", ok, why)
if not ok:
    sys.exit(0)

csv = os.path.join(TMP, "clicks.csv")
r = keel("data", "gen-clicks", csv, "--rows", "50000", "--seed", "11")
report("ingest_duckdb_gen", r.returncode == 0, r.stderr)
schema = os.path.join(TMP, "clicks.yaml")
with open(schema, "w") as f:
    f.write("""name: clicks
columns:
  - {name: user_id, type: int64, nullable: false}
  - {name: item_price, type: float64}
  - {name: ts, type: timestamp, timezone: UTC, nullable: false}
  - {name: category, type: category, nullable: false}
  - {name: clicked, type: int32, nullable: false}
""")

CSV_SEL = (f"SELECT user_id, item_price, epoch_us(ts) AS ts, category, clicked FROM read_csv('{csv}', header=true, "
           "columns={'user_id': 'BIGINT', 'item_price': 'DOUBLE', 'ts': 'TIMESTAMP', 'category': 'VARCHAR', 'clicked': 'INTEGER'})")

cases = [
    ("zstd", None),
    ("snappy", "ts"),
    ("gzip", "category"),
    ("none", None),
]
for codec, part in cases:
    name = f"{codec}" + (f"_by_{part}" if part else "")
    out = os.path.join(TMP, "ds_" + name)
    args = ["ingest", csv, "--schema", schema, "--out", out, "--codec", codec, "--json"]
    if part:
        args += ["--partition-by", part]
    r = keel(*args)
    if r.returncode != 0:
        report(f"ingest_duckdb_{name}", False, r.stderr)
        continue
    res = json.loads(r.stdout)
    glob = os.path.join(res["path"], "**", "*.parquet") if part else os.path.join(res["path"], "*.parquet")
    pq = (f"SELECT user_id, item_price, epoch_us(ts) AS ts, category, clicked "
          f"FROM read_parquet('{glob}', hive_partitioning=false)")
    try:
        q = duck(f"SELECT (SELECT count(*) FROM ({pq})) AS n, (SELECT count(item_price) FROM ({pq})) AS p, "
                 f"(SELECT count(*) FROM ({CSV_SEL})) AS rn, (SELECT count(item_price) FROM ({CSV_SEL})) AS rp, "
                 f"(SELECT count(*) FROM ({pq} EXCEPT ALL {CSV_SEL})) AS a, (SELECT count(*) FROM ({CSV_SEL} EXCEPT ALL {pq})) AS b")[0]
        cnt, ref, a, b = {"n": q["n"], "p": q["p"]}, {"n": q["rn"], "p": q["rp"]}, q["a"], q["b"]
        ok = cnt == ref and str(a) == "0" and str(b) == "0" and str(cnt["n"]) == "50000"
        report(f"ingest_duckdb_{name}", ok, f"keel {cnt} csv {ref} only-in-keel {a} only-in-csv {b}")
        if part:
            col = "ts" if part == "ts" else "category"
            expr = "strftime(to_timestamp(ts / 1e6) AT TIME ZONE 'UTC', '%Y-%m-%d')" if part == "ts" else "category"
            bad = duck(f"SELECT count(*) AS n FROM (SELECT {expr} AS v, filename AS f FROM "
                       f"(SELECT epoch_us(ts) AS ts, category, filename FROM read_parquet('{glob}', filename=true, hive_partitioning=false))) "
                       f"WHERE f NOT LIKE '%/{col}=' || v || '/%'")[0]["n"]
            report(f"ingest_duckdb_{name}_partition_values", str(bad) == "0", f"{bad} rows in the wrong partition")
    except Exception as e:
        report(f"ingest_duckdb_{name}", False, str(e))

sys.exit(1 if rep.failed else 0)
