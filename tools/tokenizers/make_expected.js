#!/usr/bin/env node
// make_expected.js — the ids Hugging Face tokenizers (the Rust library, through the npm package
// `tokenizers`) gives for every sample of tests/tokenizers/corpus.jsonl, written to
// tests/tokenizers/expected/NAME.txt for the C test (which needs no node):
//   line 1:   "# NAME SAMPLES tokenizers@VERSION"
//   then one line per sample: COUNT HASH_IDS HASH_DECODE HASH_DECODE_SKIP [ID ID ...]
// COUNT and HASH_IDS are of encode(sample, add_special_tokens=true); HASH_DECODE of
// decode(ids, skip_special_tokens=false), HASH_DECODE_SKIP of decode(ids, true) (FNV-1a 64, see
// tokenizers.js). Every 64th sample also carries its full ids, so a failure can show them.
// Usage: node tools/tokenizers/make_expected.js [NAME ...]
'use strict';
const fs = require('fs');
const path = require('path');
const tk = require('tokenizers');
const { root, list, jsonPath, hashIds, hashBytes, corpus } = require('./tokenizers');

(async () => {
  const names = process.argv.length > 2 ? process.argv.slice(2) : Object.keys(list);
  const samples = corpus();
  const ver = require('tokenizers/package.json').version;
  fs.mkdirSync(path.join(root, 'tests/tokenizers/expected'), { recursive: true });
  for (const name of names) {
    const t = tk.Tokenizer.fromFile(jsonPath(name));
    const lines = [`# ${name} ${samples.length} tokenizers@${ver}`];
    for (let i = 0; i < samples.length; i++) {
      const ids = (await t.encode(samples[i], null, { addSpecialTokens: true })).getIds();
      const d = await t.decode(ids, false), ds = await t.decode(ids, true);
      let l = `${ids.length} ${hashIds(ids)} ${hashBytes(Buffer.from(d, 'utf8'))} ${hashBytes(Buffer.from(ds, 'utf8'))}`;
      if (i % 64 === 0) l += ' ' + ids.join(' ');
      lines.push(l);
    }
    const out = path.join(root, `tests/tokenizers/expected/${name}.txt`);
    fs.writeFileSync(out, lines.join('\n') + '\n');
    console.error(`${out}: ${samples.length} samples`);
  }
})().catch((e) => { console.error(e); process.exit(1); });
