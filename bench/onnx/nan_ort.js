// ONNX Runtime side of bench/onnx/nan_check.py: runs MODEL on one raw input
// (IN.bin of DTYPE float32/float64 and shape DIMS "1,65"), writes the first
// output raw to OUT.bin and prints {"type","dims"} as JSON.
// usage: node nan_ort.js MODEL IN.bin DTYPE DIMS OUT.bin
'use strict';
const fs = require('fs');
const path = require('path');
const modDir = process.env.ORT_NODE_MODULES || path.join(__dirname, '../../build/npm/node_modules');
const ort = require(path.join(modDir, 'onnxruntime-node'));
(async () => {
  const [model, inp, dt, dims, out] = process.argv.slice(2);
  const s = await ort.InferenceSession.create(model, {graphOptimizationLevel: 'all'});
  const buf = fs.readFileSync(inp);
  const arr = dt === 'float64' ? new Float64Array(buf.buffer, buf.byteOffset, buf.length / 8) : new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
  const feeds = {}; feeds[s.inputNames[0]] = new ort.Tensor(dt, arr, dims.split(',').map(Number));
  const r = await s.run(feeds);
  const o = r[s.outputNames[0]];
  fs.writeFileSync(out, Buffer.from(o.data.buffer, o.data.byteOffset, o.data.byteLength));
  console.log(JSON.stringify({type: o.type, dims: o.dims}));
})().catch(e => { console.error(String(e)); process.exit(1); });
