// DuckDB side of bench/parquet/run.sh: times (medians of N after a warm-up) of
//   write: COPY clicks TO parquet (zstd) from an in-memory table loaded from the CSV
//   scan:  SELECT category, count(*), sum(item_price) FROM read_parquet(F) GROUP BY category
// usage: node duckdb_bench.mjs CSV KEEL_PARQUET OUT_DIR THREADS REPS [scan]
//   scan: only the two scans (CSV unused; OUT_DIR/clicks_duckdb.parquet exists)
import { createRequire } from 'module';
const require = createRequire(process.env.DUCKDB_NODE_PATH + '/');
const { DuckDBInstance } = require('@duckdb/node-api');
const [csv, keelPq, outDir, threads, reps, mode] = process.argv.slice(2);
const inst = await DuckDBInstance.create(':memory:', { threads: String(threads) });
const conn = await inst.connect();
const q = (s) => "'" + s.replace(/'/g, "''") + "'";
async function time(sql, n) {
  const t = [];
  await conn.run(sql);
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    await conn.runAndReadAll(sql);
    t.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return t;
}
const duckPq = outDir + '/clicks_duckdb.parquet';
let write = [];
if (mode !== 'scan') {
  await conn.run(`CREATE TABLE clicks AS SELECT * FROM read_csv(${q(csv)})`);
  write = await time(`COPY clicks TO ${q(duckPq)} (FORMAT parquet, COMPRESSION zstd)`, Number(reps));
}
const scanSql = (f) => `SELECT category, count(*) AS n, sum(item_price) AS s FROM read_parquet(${q(f)}) GROUP BY category ORDER BY 1`;
const scanKeel = await time(scanSql(keelPq), Number(reps));
const scanDuck = await time(scanSql(duckPq), Number(reps));
const rows = (await conn.runAndReadAll(scanSql(keelPq))).getRowsJson();
process.stdout.write(JSON.stringify({ write, scan_keel_file: scanKeel, scan_duckdb_file: scanDuck, result: rows }) + '\n');
