// DuckDB (npm @duckdb/node-api, installed into build/npm by the tests and
// bench/ingest/run.sh) for keel's ingest tests and benchmark:
//   node ingest_duckdb.mjs query SQL     prints the result rows as one JSON array
//   node ingest_duckdb.mjs time SQL N    runs SQL N times, prints [{wall, cpu}] seconds of each run
import { createRequire } from 'module';
const require = createRequire(process.env.DUCKDB_NODE_PATH + '/');
const { DuckDBInstance } = require('@duckdb/node-api');

const inst = await DuckDBInstance.create(':memory:', { threads: process.env.DUCKDB_THREADS || '2' });
const conn = await inst.connect();
const [mode, sql, n] = process.argv.slice(2);
if (mode === 'query') {
  const r = await conn.runAndReadAll(sql);
  console.log(JSON.stringify(r.getRowObjectsJson()));
} else if (mode === 'time') {
  const times = [];
  for (let i = 0; i < Number(n || 3); i++) {
    const t0 = process.hrtime.bigint(), c0 = process.cpuUsage();
    await conn.run(sql);
    const c = process.cpuUsage(c0);
    times.push({ wall: Number(process.hrtime.bigint() - t0) / 1e9, cpu: (c.user + c.system) / 1e6 });
  }
  console.log(JSON.stringify(times));
} else {
  console.error('usage: ingest_duckdb.mjs query SQL | time SQL N');
  process.exit(2);
}
