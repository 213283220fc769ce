// Expected ids from @lenml/tokenizers (the oracle): node oracle.js PKG TEXTS.json OUT.json
// PKG: an @lenml/tokenizer-* package name; resolved under $RAPID_TEST_CACHE/npm-tok.
'use strict';
const fs = require('fs');
const path = require('path');
const cache = process.env.RAPID_TEST_CACHE || path.join(process.env.HOME, '.cache/rapid-test');
const [pkg, textsPath, outPath] = process.argv.slice(2);
const mod = require(path.join(cache, 'npm-tok/node_modules', pkg));
const tok = mod.fromPreTrained();
const texts = JSON.parse(fs.readFileSync(textsPath, 'utf8'));
const out = texts.map((t) => Array.from(tok.encode(t, { add_special_tokens: false })));
const withSpecial = texts.map((t) => Array.from(tok.encode(t, { add_special_tokens: true })));
fs.writeFileSync(outPath, JSON.stringify({ ids: out, ids_special: withSpecial }));
