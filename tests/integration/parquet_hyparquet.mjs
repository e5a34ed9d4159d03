// hyparquet as the second, independent Parquet reader of keel's tests (pure JavaScript, no code
// shared with DuckDB or keel; npm hyparquet + hyparquet-compressors from build/npm, installed by
// tests/integration/pylib/duckdb_npm.py).
//   node parquet_hyparquet.mjs dump FILE...   one JSON line per file in the format of `parquet-tool dump`
//                                             (dates as days, timestamps as µs, decimals as doubles, blobs
//                                             as hex, int64 outside ±2^53 exact; nested columns as JSON
//                                             text: type "json")
import { createRequire } from 'module';
import { jsval as sharedJsval, fmt } from './parquet_json.mjs';
import { readFileSync } from 'fs';
const require = createRequire(process.env.HYPARQUET_NODE_PATH + '/');
const { parquetMetadata, parquetRead } = await import(require.resolve('hyparquet'));
const { compressors } = await import(require.resolve('hyparquet-compressors'));

// hyparquet's defaults turn dates and timestamps into JS Dates (millisecond precision): keep the
// stored integers instead, in keel's units
const floorDiv = (a, b) => { const q = a / b; return (a % b !== 0n && (a < 0n) !== (b < 0n)) ? q - 1n : q; };
const parsers = {
  timestampFromMilliseconds: (v) => BigInt(v) * 1000n,
  timestampFromMicroseconds: (v) => BigInt(v),
  timestampFromNanoseconds: (v) => floorDiv(BigInt(v), 1000n),
  dateFromDays: (v) => v,
};

const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');

function jsval(v) {
  return v instanceof Uint8Array ? hex(v) : sharedJsval(v);
}

// nested values as JSON text (BigInts as numbers, bytes as hex)
function nestedJson(v) {
  return JSON.stringify(v, (k, x) => {
    if (typeof x === 'bigint') return '@@' + x.toString() + '@@';
    if (x instanceof Uint8Array) return hex(x);
    return x;
  }).replace(/"@@(-?\d+)@@"/g, '$1');
}

// the top-level columns of the schema (flattened list: element 0 is the root) and their kinds
function topColumns(schema) {
  const cols = [];
  let i = 1;
  const skip = () => { const n = schema[i].num_children || 0; i++; for (let c = 0; c < n; c++) skip(); };
  while (i < schema.length) {
    const el = schema[i];
    const nested = (el.num_children || 0) > 0 || el.repetition_type === 'REPEATED';
    const lt = el.logical_type && el.logical_type.type, ct = el.converted_type;
    let type = el.type;
    if (nested) type = 'json';
    else if (lt === 'DATE' || ct === 'DATE') type = 'date';
    else if (lt === 'TIMESTAMP' || ct === 'TIMESTAMP_MILLIS' || ct === 'TIMESTAMP_MICROS' || el.type === 'INT96') type = 'timestamp';
    else if (lt === 'STRING' || ct === 'UTF8' || lt === 'ENUM' || ct === 'ENUM' || lt === 'JSON' || ct === 'JSON') type = 'string';
    cols.push({ name: el.name, type });
    skip();
  }
  return cols;
}

async function dump(file) {
  const b = readFileSync(file);
  const ab = b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
  const metadata = parquetMetadata(ab);
  const cols = topColumns(metadata.schema);
  const rows = Number(metadata.num_rows);
  let table = [];
  if (rows > 0 && cols.length) {
    await parquetRead({ file: ab, metadata, compressors, parsers, utf8: true, rowFormat: 'array',
                        onComplete: (r) => { table = r; } });
  }
  const data = cols.map((c, j) => table.map((r) => (c.type === 'json' ? (r[j] == null ? null : nestedJson(r[j])) : jsval(r[j]))));
  return { file, ok: true, rows: rows > 0 && cols.length ? table.length : rows, columns: cols, data };
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === 'dump') {
  for (const f of args) {
    try { process.stdout.write(fmt(await dump(f)) + '\n'); }
    catch (err) { process.stdout.write(JSON.stringify({ file: f, ok: false, error: String(err.message || err) }) + '\n'); }
  }
} else {
  process.stderr.write('usage: parquet_hyparquet.mjs dump FILE...\n');
  process.exit(2);
}
