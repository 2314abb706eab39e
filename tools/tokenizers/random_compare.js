#!/usr/bin/env node
// random_compare.js — randomized comparison of 1bit tokenize with Hugging Face tokenizers:
// N random strings per tokenizer (default 100000), in batches, ids and decodes compared
// (see compare.js). Strings mix ASCII, words and contractions in odd cases, special-token texts,
// whitespace of every kind and in runs, C0/C1 controls, combining marks, many scripts, emoji and
// ZWJ sequences, long runs, and arbitrary assigned code points (BMP and astral; see assigned.c).
//   node tools/tokenizers/random_compare.js [--n N] [--seed S] [--no-special] [NAME ...]
// Prints one line per tokenizer and the first differences; exits 1 if any.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { compare } = require('./compare');
const { root, list } = require('./tokenizers');

// Assigned code points as the C side's Unicode tables know them (see assigned.c).
const helper = path.join(root, 'build/assigned');
if (!fs.existsSync(helper)) {
  fs.mkdirSync(path.dirname(helper), { recursive: true });
  execFileSync('cc', ['-O2', '-o', helper, path.join(__dirname, 'assigned.c'), '-lutf8proc']);
}
// Code points probe_codepoints.js found to differ alone (Unicode-version differences, listed in
// docs/tokenizers.md) are left out of the arbitrary draws, when that probe has run.
const diffFile = path.join(root, 'build/codepoint_diffs.json');
const EXCLUDED = new Set();
if (fs.existsSync(diffFile)) for (const l of Object.values(JSON.parse(fs.readFileSync(diffFile)))) for (const c of l) EXCLUDED.add(c);
const ASSIGNED = [];
for (const [a, b] of JSON.parse(execFileSync(helper).toString())) {
  let lo = a;
  for (let c = a; c <= b + 1; c++)
    if (c > b || EXCLUDED.has(c)) { if (c > lo) ASSIGNED.push([lo, c - 1]); lo = c + 1; }
}
const weights = ASSIGNED.map(([a, b]) => b - a + 1);
const total = weights.reduce((a, b) => a + b, 0);

const args = process.argv.slice(2);
let n = 100000, seed = 1, addSpecial = true;
const names = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--n') n = +args[++i];
  else if (args[i] === '--seed') seed = +args[++i];
  else if (args[i] === '--no-special') addSpecial = false;
  else names.push(args[i]);
}

let s = BigInt(seed) * 0x9e3779b97f4a7c15n & 0xffffffffffffffffn || 1n;
function rnd(k) {   // xorshift64*
  s ^= s << 13n; s &= 0xffffffffffffffffn; s ^= s >> 7n; s ^= s << 17n; s &= 0xffffffffffffffffn;
  return Number((s * 0x2545f4914f6cdd1dn & 0xffffffffffffffffn) >> 11n) % k;
}
const pick = (a) => a[rnd(a.length)];
const range = (a, b) => String.fromCodePoint(a + rnd(b - a + 1));

const WS = [' ', ' ', ' ', '\t', '\n', '\r', '\r\n', '\u00a0', '\u3000', '\u2002', '\u2009', '\u200a', '\u2028', '\u2029',
            '\u180e', '\u0085', '\v', '\f', '\u200b', '\u202f', '\u205f', '\u1680'];
const WORDS = ['the', 'The', 'THE', 'a', 'of', "'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'D",
               "don't", "I'm", "you'RE", 'hello', 'world', 'naïve', 'Straße', 'İ', 'ı', 'ǅ', 'ﬀ', 'ﬁ', 'Å', 'Å', 'é', 'é',
               'ΣΑΣ', 'ς', '１２３', 'Ⅸ', '²', '½', '٣', '߂', '፲', '𝟙', '<s>', '</s>', '<unk>', '<pad>', '<|endoftext|>',
               '<|im_start|>', '<|im_end|>', '<|begin_of_text|>', '<|eot_id|>', '<bos>', '<eos>', '<start_of_turn>',
               '<end_of_turn>', '[CLS]', '[SEP]', '[MASK]', '[UNK]', '[PAD]', '<|start|>', '<|message|>', '<|end|>',
               '<｜begin▁of▁sentence｜>', '<｜User｜>', '<tool_call>', '<think>', '<0x0A>', '<0xFF>', '▁', '▁▁', 'Ġ', 'Ċ',
               '##', '##ing', '...', '--', '->', '::', '//', '/*', '{}', '()', '[]', '<>', '&&', '||', '!=', '==', '0x1F',
               'http://x.y/z', 'a_b', 'fooBar', 'HTTPServer', 'iPhone', '3.14', '1e-9', '10,000', '2024', '007'];
const BLOCKS = [[0x20, 0x7e], [0xa0, 0xff], [0x100, 0x17f], [0x180, 0x24f], [0x250, 0x2af], [0x2b0, 0x2ff], [0x300, 0x36f],
                [0x370, 0x3ff], [0x400, 0x4ff], [0x530, 0x58f], [0x590, 0x5ff], [0x600, 0x6ff], [0x900, 0x97f], [0x980, 0x9ff],
                [0xb80, 0xbff], [0xe00, 0xe7f], [0x10a0, 0x10ff], [0x1100, 0x11ff], [0x1e00, 0x1eff], [0x1f00, 0x1fff],
                [0x2000, 0x206f], [0x2070, 0x209f], [0x20a0, 0x20cf], [0x2100, 0x214f], [0x2150, 0x218f], [0x2190, 0x21ff],
                [0x2200, 0x22ff], [0x2500, 0x257f], [0x2600, 0x26ff], [0x2700, 0x27bf], [0x3000, 0x303f], [0x3040, 0x309f],
                [0x30a0, 0x30ff], [0x3130, 0x318f], [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xf900, 0xfaff], [0xfb00, 0xfb4f],
                [0xfe00, 0xfe0f], [0xfe30, 0xfe4f], [0xff00, 0xffef], [0x1d400, 0x1d7ff], [0x1f300, 0x1f64f], [0x1f680, 0x1f6ff],
                [0x1f900, 0x1f9ff], [0x20000, 0x2a6df], [0xe0000, 0xe007f], [0xf0000, 0xf00ff]];
const EMOJI = ['😀', '👍🏻', '👩‍👩‍👧', '🏳️‍⚧️', '🇺🇸', '🇫🇷', '❤️‍🔥', '🧔‍♂️', '✋🏿', '🫶', '🪐', '©️', '™', '↔️', '🔟', '*️⃣'];

// A random assigned code point below max (any category: controls, marks, private use, ...).
function anyCp(max) {
  for (;;) {
    let k = rnd(total);
    for (let i = 0; i < ASSIGNED.length; i++) {
      if (k < weights[i]) { const c = ASSIGNED[i][0] + k; if (c <= max) return String.fromCodePoint(c); break; }
      k -= weights[i];
    }
  }
}

function piece() {
  const r = rnd(100);
  if (r < 20) return pick(WORDS);
  if (r < 32) { let w = ''; const k = 1 + rnd(12); for (let i = 0; i < k; i++) w += String.fromCharCode(0x61 + rnd(26) - (rnd(4) ? 0 : 32)); return w; }
  if (r < 44) return pick(WS).repeat(1 + (rnd(4) ? 0 : rnd(30)));
  if (r < 50) return String(rnd(1e6)).repeat(1 + rnd(3));
  if (r < 56) return String.fromCharCode(rnd(4) ? rnd(0x20) : 0x7f + rnd(0x21));
  if (r < 62) return String.fromCharCode(0x21 + rnd(15)).repeat(1 + rnd(3));
  if (r < 78) { const b = pick(BLOCKS); let w = ''; const k = 1 + rnd(8); for (let i = 0; i < k; i++) w += range(b[0], b[1]); return w; }
  if (r < 84) return pick(EMOJI);
  if (r < 87) return range(0x300, 0x36f);
  if (r < 92) return anyCp(0xffff);
  if (r < 95) return anyCp(0x10ffff);
  if (r < 97) return pick(WORDS) + pick(WORDS);
  return String.fromCharCode(0x61 + rnd(3)).repeat(50 + rnd(400));   // long words
}

function randomString() {
  let str = '';
  const k = rnd(10) ? 1 + rnd(25) : 1 + rnd(120);
  for (let i = 0; i < k; i++) str += piece();
  return str;
}

(async () => {
  const todo = names.length ? names : Object.keys(list);
  let bad = 0;
  for (const name of todo) {
    s = BigInt(seed) * 0x9e3779b97f4a7c15n & 0xffffffffffffffffn || 1n;   // same strings for every tokenizer
    const t0 = Date.now();
    let done = 0, ndiff = 0;
    const shown = [];
    while (done < n) {
      const batch = [];
      for (let i = 0; i < Math.min(10000, n - done); i++) batch.push(randomString());
      const r = await compare(name, batch, { addSpecial, maxDiffs: 5 });
      ndiff += r.ndiff;
      for (const d of r.diffs) if (shown.length < 8) shown.push(d);
      done += batch.length;
    }
    console.log(`${name}: ${done} random strings (seed ${seed}${addSpecial ? '' : ', no special'}; ${EXCLUDED.size} code points excluded), ${ndiff} differences, ${((Date.now() - t0) / 1000).toFixed(0)} s`);
    for (const d of shown) console.log('   ', JSON.stringify(d).slice(0, 700));
    bad += ndiff;
  }
  process.exit(bad ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(2); });
