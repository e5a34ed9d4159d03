// The benchmark's ten features as DuckDB 1.5 window SQL over the same
// Parquet files keel reads (node; @duckdb/node-api from build/npm).
//   node duckdb_features.mjs 'GLOB' OUT.parquet    prints {"seconds": S, "rows": N}
// Standardize statistics are computed in the same query (fit + apply). The
// windows are strictly before the row's time: count over RANGE ... 1 µs
// PRECEDING; the mean interval of the last 3 earlier events from lag()s
// (the click log has no ties within a user). DuckDB's hash() stands in for
// XXH64 (same cost class, other values).
import { createRequire } from 'module';
const require = createRequire(process.env.DUCKDB_NODE_PATH + '/');
const { DuckDBInstance } = require('@duckdb/node-api');

const [glob, out] = process.argv.slice(2);
const inst = await DuckDBInstance.create(':memory:', { threads: process.env.DUCKDB_THREADS || '2' });
const conn = await inst.connect();
const sql = `
COPY (
  WITH d AS (SELECT * FROM read_parquet('${glob}')),
  s AS (SELECT avg(item_price) mp, stddev_pop(item_price) sp,
               avg(epoch_us(ts)::DOUBLE) mt, stddev_pop(epoch_us(ts)::DOUBLE) st,
               avg(user_id::DOUBLE) mu, stddev_pop(user_id::DOUBLE) su FROM d),
  w AS (
    SELECT d.*,
      count(*) OVER (PARTITION BY user_id ORDER BY ts
                     RANGE BETWEEN UNBOUNDED PRECEDING AND INTERVAL 1 MICROSECOND PRECEDING) AS user_prev_count,
      epoch_us(lag(ts, 1) OVER u) AS l1, epoch_us(lag(ts, 2) OVER u) AS l2, epoch_us(lag(ts, 3) OVER u) AS l3
    FROM d WINDOW u AS (PARTITION BY user_id ORDER BY ts))
  SELECT
    ((coalesce(item_price, 0) - s.mp) / s.sp)::FLOAT AS price_z,
    ((epoch_us(ts) - s.mt) / s.st)::FLOAT AS ts_z,
    ((user_id - s.mu) / s.su)::FLOAT AS user_z,
    (category = 'books')::INT::FLOAT AS "category=books",
    (category = 'toys')::INT::FLOAT AS "category=toys",
    (category = 'home')::INT::FLOAT AS "category=home",
    (category = 'sports')::INT::FLOAT AS "category=sports",
    (category = 'beauty')::INT::FLOAT AS "category=beauty",
    (category = 'garden')::INT::FLOAT AS "category=garden",
    (category NOT IN ('books','toys','home','sports','beauty','garden'))::INT::FLOAT AS "category=<unknown>",
    (hash(user_id::VARCHAR) % 1024)::INT AS user_bucket,
    hour(ts)::FLOAT AS hour,
    (isodow(ts) - 1)::FLOAT AS weekday,
    ((epoch_us(ts) - epoch_us(TIMESTAMP '2023-11-01 00:00:00')) / 3600e6)::FLOAT AS age_h,
    user_prev_count::FLOAT AS user_prev_count,
    coalesce((l1 - l3) / 2e6, (l1 - l2) / 1e6, -1)::FLOAT AS user_gap3,
    clicked
  FROM w, s
) TO '${out}' (FORMAT parquet, COMPRESSION zstd)`;
const t0 = process.hrtime.bigint();
await conn.run(sql);
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
const n = (await conn.runAndReadAll(`SELECT count(*) FROM read_parquet('${out}')`)).getRows()[0][0];
console.log(JSON.stringify({ seconds: secs, rows: Number(n) }));
