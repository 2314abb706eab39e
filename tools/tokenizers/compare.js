#!/usr/bin/env node
// compare.js — 1bit tokenize against Hugging Face tokenizers, sample by sample, in batch:
// the samples go to `1bit tokenize --jsonl` (one JSON string per line in, one id array out) and
// to the npm package `tokenizers` (the Rust library); ids, decode(ids) and decode(ids, skip
// special) are compared. Exported for random_compare.js; run alone it checks the corpus:
//   node tools/tokenizers/compare.js [NAME ...]
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const tk = require('tokenizers');
const { root, list, jsonPath, corpus } = require('./tokenizers');

const bin = process.env.ONEBIT || path.join(root, 'build/1bit');

function ours(tokPath, inputs, args) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'obtok-'));
  const f = path.join(dir, 'in.jsonl');
  fs.writeFileSync(f, inputs.map((x) => JSON.stringify(x)).join('\n') + '\n');
  const out = execFileSync(bin, ['tokenize', '--tokenizer', tokPath, '--jsonl', f, ...args], { maxBuffer: 1 << 30 });
  fs.rmSync(dir, { recursive: true });
  return out.toString('utf8').split('\n').filter((l) => l.length).map((l) => JSON.parse(l));
}

// Returns {n, diffs: [{i, kind, text, hf, ours}]}; stops collecting after maxDiffs.
async function compare(name, samples, opts = {}) {
  const tokPath = opts.tokPath || jsonPath(name);
  const t = tk.Tokenizer.fromFile(jsonPath(name));
  const add = opts.addSpecial !== false;
  const mine = ours(tokPath, samples, add ? [] : ['--no-special']);
  const hf = (await t.encodeBatch(samples, { addSpecialTokens: add })).map((e) => e.getIds());
  const diffs = [];
  const max = opts.maxDiffs || 20;
  let nd = 0;
  for (let i = 0; i < samples.length; i++) {
    if (JSON.stringify(mine[i]) !== JSON.stringify(hf[i])) {
      nd++;
      if (diffs.length < max) diffs.push({ i, kind: 'ids', text: samples[i], hf: hf[i], ours: mine[i] });
    }
  }
  if (opts.decode !== false) {
    for (const skip of [false, true]) {
      const dec = ours(tokPath, hf, ['--decode', ...(skip ? ['--skip-special'] : [])]);
      const wants = await t.decodeBatch(hf, skip);
      for (let i = 0; i < samples.length; i++) {
        const want = wants[i];
        if (dec[i] !== want) {
          nd++;
          if (diffs.length < max) diffs.push({ i, kind: skip ? 'decode-skip' : 'decode', text: samples[i], hf: want, ours: dec[i] });
        }
      }
    }
  }
  return { n: samples.length, ndiff: nd, diffs };
}

module.exports = { compare };

if (require.main === module) {
  (async () => {
    const names = process.argv.length > 2 ? process.argv.slice(2) : Object.keys(list);
    const samples = corpus();
    let bad = 0;
    for (const name of names) {
      const r = await compare(name, samples);
      console.log(`${name}: ${r.n} samples, ${r.ndiff} differences`);
      for (const d of r.diffs.slice(0, 5)) console.log('  ', JSON.stringify(d).slice(0, 600));
      bad += r.ndiff;
    }
    process.exit(bad ? 1 : 0);
  })().catch((e) => { console.error(e); process.exit(2); });
}
