#!/usr/bin/env node
// probe_codepoints.js — every code point the C side's Unicode tables assign (assigned.c), each in
// a small context ("a" c "a " c c " 1" c), through 1bit and Hugging Face; prints the code points
// whose ids or decodes differ, per tokenizer, and writes them as JSON to OUT (default
// build/codepoint_diffs.json). random_compare.js leaves those code points out of its arbitrary
// draws (they are the documented Unicode-version differences, docs/tokenizers.md).
//   node tools/tokenizers/probe_codepoints.js [--out F] [NAME ...]
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { compare } = require('./compare');
const { root, list } = require('./tokenizers');

const args = process.argv.slice(2);
let out = path.join(root, 'build/codepoint_diffs.json');
const names = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--out') out = args[++i];
  else names.push(args[i]);
}
const helper = path.join(root, 'build/assigned');
if (!fs.existsSync(helper)) execFileSync('cc', ['-O2', '-o', helper, path.join(__dirname, 'assigned.c'), '-lutf8proc']);
const cps = [];
for (const [a, b] of JSON.parse(execFileSync(helper).toString())) for (let c = a; c <= b; c++) cps.push(c);

(async () => {
  const result = {};
  for (const name of names.length ? names : Object.keys(list)) {
    const bad = [];
    for (let i = 0; i < cps.length; i += 100000) {
      const chunk = cps.slice(i, i + 100000);
      const texts = chunk.map((c) => { const s = String.fromCodePoint(c); return `a${s}a ${s}${s} 1${s}`; });
      const r = await compare(name, texts, { maxDiffs: 1e9 });
      for (const d of r.diffs) bad.push(chunk[d.i]);
    }
    const uniq = [...new Set(bad)].sort((x, y) => x - y);
    result[name] = uniq;
    console.log(`${name}: ${cps.length} code points, ${uniq.length} differ: ${uniq.slice(0, 40).map((c) => 'U+' + c.toString(16).toUpperCase().padStart(4, '0')).join(' ')}`);
  }
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, JSON.stringify(result));
})().catch((e) => { console.error(e); process.exit(1); });
