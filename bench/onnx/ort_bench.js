// ONNX Runtime (onnxruntime-node 1.30, CPU) side of bench/onnx: loads MODEL,
// feeds the .npy inputs given as NAME=FILE, warms up, times ITERS runs and
// prints {"p50_ms","p90_ms","p99_ms","throughput","mean_ms"} as JSON.
// usage: node ort_bench.js MODEL THREADS ITERS WARMUP BATCH NAME=FILE...
'use strict';
const fs = require('fs');
const path = require('path');
const modDir = process.env.ORT_NODE_MODULES || path.join(__dirname, '../../build/npm/node_modules');
const ort = require(path.join(modDir, 'onnxruntime-node'));

function readNpy(file) {
  const buf = fs.readFileSync(file);
  const v1 = buf[6] === 1;
  const hlen = v1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const hstart = v1 ? 10 : 12;
  const header = buf.slice(hstart, hstart + hlen).toString('latin1');
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map(s => s.trim()).filter(s => s.length).map(Number);
  const data = buf.slice(hstart + hlen);
  const ab = data.buffer.slice(data.byteOffset, data.byteOffset + data.length);
  switch (descr) {
    case '<f4': return new ort.Tensor('float32', new Float32Array(ab), shape);
    case '<i8': return new ort.Tensor('int64', new BigInt64Array(ab), shape);
    case '<i4': return new ort.Tensor('int32', new Int32Array(ab), shape);
    case '|b1': return new ort.Tensor('bool', new Uint8Array(ab), shape);
    default: throw new Error('unsupported npy dtype ' + descr);
  }
}

async function main() {
  const [model, threads, iters, warm, batch, ...ins] = process.argv.slice(2);
  const sess = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(threads), interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all'});
  const feeds = {};
  for (const kv of ins) {
    const i = kv.indexOf('=');
    feeds[kv.slice(0, i)] = readNpy(kv.slice(i + 1));
  }
  const lat = [];
  for (let i = 0; i < Number(warm) + Number(iters); i++) {
    const t = process.hrtime.bigint();
    await sess.run(feeds);
    if (i >= Number(warm)) lat.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  const mean = lat.reduce((a, b) => a + b, 0) / lat.length;
  lat.sort((a, b) => a - b);
  const pct = p => { const r = p / 100 * (lat.length - 1), i = Math.floor(r); return i >= lat.length - 1 ? lat[lat.length - 1] : lat[i] + (lat[i + 1] - lat[i]) * (r - i); };
  console.log(JSON.stringify({p50_ms: pct(50), p90_ms: pct(90), p99_ms: pct(99), mean_ms: mean,
                              throughput: Number(batch) * 1000 / mean}));
}
main().catch(e => { console.error(String(e)); process.exit(1); });
