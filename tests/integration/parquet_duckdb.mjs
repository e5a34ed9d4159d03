// DuckDB as the oracle of keel's Parquet tests (run with node; @duckdb/node-api
// from build/npm, installed by tests/integration/parquet_interop.py).
//   node parquet_duckdb.mjs dump FILE...   one JSON line per file in the format of
//                                          `parquet-tool dump` (dates as days, timestamps as µs,
//                                          decimals as doubles, blobs as hex, nested columns as the
//                                          text of to_json: type "json")
//   node parquet_duckdb.mjs json FILE...   one JSON line per file: {file, ok, rows: [to_json of each row]}
//                                          (nested columns as JSON values: the oracle of `keel data head --json`)
//   node parquet_duckdb.mjs sql STMT...    runs statements (COPY ... TO for test files)
//   node parquet_duckdb.mjs time STMT      runs STMT 5 times (after a warm-up), prints seconds
import { createRequire } from 'module';
import { jsval, fmt } from './parquet_json.mjs';
const require = createRequire(process.env.DUCKDB_NODE_PATH + '/');
const { DuckDBInstance } = require('@duckdb/node-api');

const inst = await DuckDBInstance.create(':memory:', { threads: process.env.DUCKDB_THREADS || '2' });
const conn = await inst.connect();
await conn.run('SET enable_geoparquet_conversion = false');
const q = (s) => "'" + s.replace(/'/g, "''") + "'";
const id = (s) => '"' + s.replace(/"/g, '""') + '"';

async function dump(file) {
  const desc = await conn.runAndReadAll(`DESCRIBE SELECT * FROM read_parquet(${q(file)})`);
  const cols = [], exprs = [];
  for (const row of desc.getRowObjectsJS()) {
    const name = row.column_name, type = String(row.column_type);
    let e = id(name), kt = null;
    if (/^(STRUCT|MAP|UNION)/.test(type) || type.endsWith('[]') || /\[\d+\]$/.test(type)) { e = `to_json(${e})::VARCHAR`; kt = 'json'; }
    else if (type === 'DATE') { e = `(${e} - DATE '1970-01-01')::BIGINT`; kt = 'date'; }
    else if (type === 'TIMESTAMP_NS') { e = `epoch_ns(${e})`; kt = 'timestamp_ns'; }
    else if (type.startsWith('TIMESTAMP')) { e = `epoch_us(${e})`; kt = 'timestamp'; }
    else if (type.startsWith('TIME')) { e = `(hour(${e})::BIGINT * 3600000000 + minute(${e})::BIGINT * 60000000 + microsecond(${e}))`; kt = 'int64'; }
    else if (type.startsWith('DECIMAL')) { e = `${e}::DOUBLE`; kt = 'float64'; }
    else if (type === 'BLOB' || type === 'UUID') { e = type === 'UUID' ? `replace(${e}::VARCHAR, '-', '')` : `lower(hex(${e}))`; kt = 'binary'; }
    else if (type === 'HUGEINT' || type === 'UBIGINT') { e = `${e}::VARCHAR`; kt = 'bigstr'; }
    cols.push({ name, type: kt || type });
    exprs.push(e + ' AS ' + id(name));
  }
  const res = await conn.runAndReadAll(`SELECT ${exprs.join(', ') || '1'} FROM read_parquet(${q(file)})`);
  const data = exprs.length ? res.getColumnsJS() : [];
  const out = [];
  for (let j = 0; j < cols.length; j++) {
    out.push((data[j] || []).map((v) => {
      if (cols[j].type === 'timestamp_ns' && typeof v === 'bigint') {
        let d = v / 1000n; if (v < 0n && d * 1000n !== v) d -= 1n; return jsval(d);
      }
      if (cols[j].type === 'bigstr' && v !== null) return { big: v };
      return jsval(v);
    }));
  }
  return { file, ok: true, rows: Number(res.currentRowCount ?? (out[0] ? out[0].length : 0)), columns: cols, data: out };
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === 'dump') {
  for (const f of args) {
    try { process.stdout.write(fmt(await dump(f)) + '\n'); }
    catch (err) { process.stdout.write(JSON.stringify({ file: f, ok: false, error: String(err.message || err) }) + '\n'); }
  }
} else if (cmd === 'json') {
  for (const f of args) {
    try {
      const res = await conn.runAndReadAll(`SELECT to_json(t)::VARCHAR AS j FROM read_parquet(${q(f)}) t`);
      const rows = res.getColumnsJS()[0] || [];
      process.stdout.write('{"file":' + JSON.stringify(f) + ',"ok":true,"rows":[' + rows.join(',') + ']}\n');
    } catch (err) { process.stdout.write(JSON.stringify({ file: f, ok: false, error: String(err.message || err) }) + '\n'); }
  }
} else if (cmd === 'sql') {
  for (const s of args) await conn.run(s);
} else if (cmd === 'time') {
  const res = [];
  await conn.runAndReadAll(args[0]);
  let last;
  for (let i = 0; i < 5; i++) {
    const t0 = process.hrtime.bigint();
    last = await conn.runAndReadAll(args[0]);
    res.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  process.stdout.write(JSON.stringify({ seconds: res, rows: last.getRowsJson() }) + '\n');
} else {
  process.stderr.write('usage: parquet_duckdb.mjs dump|sql|time ...\n');
  process.exit(2);
}
