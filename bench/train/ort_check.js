// bench/train/ort_check.js: cross-check of keel train exports in ONNX Runtime (onnxruntime-node 1.30, CPU).
// Usage: NODE_PATH=build/npm/node_modules node bench/train/ort_check.js model.onnx x.npy out.bin
// Runs model.onnx in ONNX Runtime (CPU) on a float32 .npy input and writes the output as raw float32.
const ort = require('onnxruntime-node');
const fs = require('fs');
function loadNpy(p) {
  const b = fs.readFileSync(p); const hl = b.readUInt16LE(8); const h = b.slice(10, 10 + hl).toString();
  const shape = h.match(/\(([^)]*)\)/)[1].split(',').filter(s => s.trim()).map(Number);
  const data = new Float32Array(b.buffer.slice(b.byteOffset + 10 + hl, b.byteOffset + b.length));
  return new ort.Tensor('float32', data, shape);
}
(async () => {
  const s = await ort.InferenceSession.create(process.argv[2]);
  const r = await s.run({input: loadNpy(process.argv[3])});
  fs.writeFileSync(process.argv[4], Buffer.from(r.output.data.buffer));
  console.log('ok', r.output.dims);
})().catch(e => { console.error(e); process.exit(1); });
