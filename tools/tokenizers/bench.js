#!/usr/bin/env node
// bench.js — encoding speed of 1bit against Hugging Face tokenizers (Rust, through the npm
// package `tokenizers`), one thread each, on tests/tokenizers/corpus.jsonl: every sample encoded
// on its own with special tokens, REPS passes, best pass kept. Hugging Face is timed two ways, with
// TOKENIZERS_PARALLELISM=false and RAYON_NUM_THREADS=1 (one thread): encodeBatch over all samples
// (one call from node per pass) and encode per sample (one call per sample); the faster counts
// (both include the node binding's overhead, which a Rust caller would not pay). Times are CPU
// time (the process's user + system for Hugging Face, the encoding thread's for 1bit), because
// the machine is shared and its wall clock measures the scheduler more than the tokenizer.
// 1bit runs `1bit tokenize --jsonl corpus --bench REPS`.
// --wall: wall-clock time instead (both sides), for a machine that is not shared.
//   node tools/tokenizers/bench.js [--reps N] [--wall] [NAME ...]     (prints a markdown table)
'use strict';
process.env.TOKENIZERS_PARALLELISM = 'false';
process.env.RAYON_NUM_THREADS = '1';
const path = require('path');
const { execFileSync } = require('child_process');
const tk = require('tokenizers');
const { root, list, jsonPath, corpus } = require('./tokenizers');

const args = process.argv.slice(2);
let reps = 3, wall = false;
const names = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--reps') reps = +args[++i];
  else if (args[i] === '--wall') wall = true;
  else names.push(args[i]);
}
const bin = process.env.ONEBIT || path.join(root, 'build/1bit');

(async () => {
  const samples = corpus();
  const bytes = samples.reduce((a, s) => a + Buffer.byteLength(s), 0);
  console.log(`| tokenizer | tokens | HF tokenizers MB/s | 1bit MB/s | 1bit / HF |`);
  console.log(`| --- | ---: | ---: | ---: | ---: |`);
  for (const name of names.length ? names : Object.keys(list)) {
    const t = tk.Tokenizer.fromFile(jsonPath(name));
    let best = Infinity, tokens = 0;
    for (let r = 0; r < reps; r++) {
      const clock = () => (wall ? Number(process.hrtime.bigint()) / 1e9 : (() => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; })());
      let c0 = clock();
      const enc = await t.encodeBatch(samples, { addSpecialTokens: true });
      let sec = clock() - c0;
      if (sec < best) best = sec;
      if (r === 0) tokens = enc.reduce((a, e) => a + e.getLength(), 0);
      c0 = clock();
      for (const x of samples) await t.encode(x, null, { addSpecialTokens: true });
      sec = clock() - c0;
      if (sec < best) best = sec;
    }
    const hf = bytes / 1e6 / best;
    const out = JSON.parse(execFileSync(bin, ['tokenize', '--tokenizer', jsonPath(name), '--jsonl',
      path.join(root, 'tests/tokenizers/corpus.jsonl'), '--bench', String(reps)]).toString());
    if (out.tokens !== tokens) throw new Error(`${name}: token counts differ (${out.tokens} vs ${tokens})`);
    const mine = wall ? bytes / 1e6 / out.best_wall_seconds : out.MB_per_s;
    console.log(`| ${name} | ${tokens} | ${hf.toFixed(2)} | ${mine.toFixed(2)} | ${(mine / hf).toFixed(2)}x |`);
  }
})().catch((e) => { console.error(e); process.exit(1); });
