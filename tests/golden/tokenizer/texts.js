// Writes the golden text set: texts.json plus every distinct text of llama.cpp's GGUF vocab
// test inputs (models/ggml-vocab-*.gguf.inp, read at test time from the cache).
//   node texts.js TEXTS.json LLAMACPP_MODELS_DIR OUT.json
'use strict';
const fs = require('fs');
const path = require('path');
const [textsPath, modelsDir, outPath] = process.argv.slice(2);
const texts = JSON.parse(fs.readFileSync(textsPath, 'utf8'));
const seen = new Set(texts);
for (const f of fs.readdirSync(modelsDir).sort()) {
  if (!f.endsWith('.gguf.inp')) continue;
  const parts = fs.readFileSync(path.join(modelsDir, f), 'utf8').split('\n__ggml_vocab_test__\n');
  parts.pop(); // after the last separator
  for (const t of parts) if (!seen.has(t)) { seen.add(t); texts.push(t); }
}
fs.writeFileSync(outPath, JSON.stringify(texts));
console.log(`golden texts: ${texts.length}`);
