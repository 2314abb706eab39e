#!/usr/bin/env node
// build_corpus.js — builds tests/tokenizers/corpus.jsonl, the text the tokenizer tests compare
// against Hugging Face tokenizers: one JSON string per line (a "sample"; samples may hold any
// characters, newlines included).
//
// Sources (all openly licensed and present on a Debian 12 machine with this project's
// dependencies; docs/tokenizers.md lists them with their licences):
//   - English prose: /usr/share/common-licenses (GPL-3, Apache-2.0, MPL-2.0, Artistic, GFDL-1.3)
//   - 19 other languages / scripts: the translated messages (msgstr) of GLib, GTK 2 and iso-codes
//     (LGPL-2.1+), read straight from their .mo catalogues
//   - code: Python's textwrap.py and json/decoder.py (PSF), pcre2.h (BSD), utf8proc.h (MIT)
//   - generated (seeded, deterministic): emoji and ZWJ sequences, whitespace runs, control
//     characters, very long words, digits, contractions, special-token look-alikes, mixed scripts
// Usage: node tools/tokenizers/build_corpus.js [OUT]   (default tests/tokenizers/corpus.jsonl)
'use strict';
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '../..');
const out = process.argv[2] || path.join(root, 'tests/tokenizers/corpus.jsonl');
const samples = [];

function need(p) {
  if (!fs.existsSync(p)) throw new Error(`${p}: missing (see the sources listed in docs/tokenizers.md)`);
  return p;
}

// Groups paragraphs into samples of at most max characters (a paragraph longer than that is
// one sample by itself).
function addText(text, max) {
  const paras = text.split(/\n\s*\n/);
  let cur = '';
  for (const p of paras) {
    if (cur && cur.length + p.length + 2 > max) { samples.push(cur); cur = ''; }
    cur = cur ? cur + '\n\n' + p : p;
  }
  if (cur) samples.push(cur);
}

// The translated strings of a GNU .mo catalogue.
function moStrings(file) {
  const b = fs.readFileSync(need(file));
  let le = b.readUInt32LE(0) === 0x950412de;
  const u32 = (o) => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
  const n = u32(8), tOff = u32(16);
  const res = [];
  for (let i = 1; i < n; i++) {   // entry 0 is the header
    const len = u32(tOff + 8 * i), off = u32(tOff + 8 * i + 4);
    for (const s of b.subarray(off, off + len).toString('utf8').split('\0')) if (s.trim()) res.push(s);
  }
  return res;
}

// --- English and code ---
for (const f of ['GPL-3', 'Apache-2.0', 'MPL-2.0', 'Artistic', 'GFDL-1.3'])
  addText(fs.readFileSync(need('/usr/share/common-licenses/' + f), 'utf8'), 1500);
for (const f of ['/usr/lib/python3.11/textwrap.py', '/usr/lib/python3.11/json/decoder.py', '/usr/include/pcre2.h',
                 '/usr/include/utf8proc.h'])
  addText(fs.readFileSync(need(f), 'utf8'), 2500);
// one long sample: a whole source file
samples.push(fs.readFileSync('/usr/lib/python3.11/textwrap.py', 'utf8'));

// --- other languages ---
const langs = ['ja', 'zh_CN', 'zh_TW', 'ko', 'ru', 'uk', 'el', 'ar', 'he', 'fa', 'hi', 'bn', 'ta', 'th', 'vi', 'tr',
               'de', 'fr', 'es'];
for (const l of langs) {
  let budget = 42000;
  let cur = '';
  for (const cat of ['glib20', 'gtk20', 'iso_3166-1']) {
    for (const s of moStrings(`/usr/share/locale/${l}/LC_MESSAGES/${cat}.mo`)) {
      if (budget <= 0) break;
      budget -= s.length;
      cur += (cur ? (cur.length % 3 ? ' ' : '\n') : '') + s;
      if (cur.length > 700) { samples.push(cur); cur = ''; }
    }
  }
  if (cur) samples.push(cur);
}

// --- generated ---
let seed = 0x1b17n;
function rnd(n) {   // xorshift64*, deterministic across machines
  seed ^= seed << 13n; seed &= 0xffffffffffffffffn;
  seed ^= seed >> 7n;
  seed ^= seed << 17n; seed &= 0xffffffffffffffffn;
  return Number((seed * 0x2545f4914f6cdd1dn & 0xffffffffffffffffn) >> 11n) % n;
}
const pick = (a) => a[rnd(a.length)];
const emoji = ['😀', '😂', '🥲', '👍', '👍🏽', '👩‍💻', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇯🇵', '🇩🇪', '❤️', '✨', '🔥', '🤖', '🧑🏿‍🚀', '🫠',
               '☕', '1️⃣', '#️⃣', '🙇‍♀️', '🐍', '🦀', '🌍'];
const ws = [' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', '\u00a0', '\u3000', '\u2003', '\u200b', ' \n ', '\t\t', '\u2028',
            '\u180e', '\u0085', '\f', '\v'];
const words = ['the', 'quick', 'brown', 'fox', "don't", "I'M", "we'll", "it's", "THEY'RE", 'naïve', 'café', 'Straße',
               'über', 'résumé', 'İstanbul', 'ΣΟΦΊΑ', 'Ⅻ', 'ﬁnance', 'Ａｂｃ', '①②', 'x²', 'e\u0301', 'n\u0303', '한국어',
               '日本語', 'русский', 'العربية', 'עברית', 'हिन्दी', 'ไทย', '中文', '½', '3.14159', '1,000,000', '2024-01-31',
               'user@example.com', 'https://example.org/a?b=c&d=e', '<s>', '</s>', '<|endoftext|>', '<|im_start|>',
               '<|begin_of_text|>', '[CLS]', '[SEP]', '[MASK]', '<unk>', '<bos>', '<start_of_turn>', '<0x41>', '▁', '##ing',
               'Ġ', 'ĊĊ', '\\n', '{"a": 1}', 'foo_bar', 'fooBar', '$x', '@@', '...', '—', '«»', '¿', '¡'];
for (let i = 0; i < 400; i++) {   // word salad with odd whitespace and emoji
  let s = '';
  const n = 5 + rnd(60);
  for (let k = 0; k < n; k++) {
    const r = rnd(10);
    s += r < 6 ? pick(words) : r < 8 ? pick(emoji) : pick(ws);
    s += rnd(3) ? ' ' : pick(ws);
  }
  samples.push(s);
}
for (let i = 0; i < 120; i++) {   // whitespace runs
  let s = pick(words);
  for (let k = 0; k < 1 + rnd(6); k++) s += pick(ws).repeat(1 + rnd(40)) + pick(words);
  samples.push(rnd(2) ? s : pick(ws).repeat(1 + rnd(200)));
}
for (let i = 0; i < 120; i++) {   // control characters, C0 and C1, and other odd code points
  let s = '';
  for (let k = 0; k < 1 + rnd(40); k++) {
    const r = rnd(6);
    const cp = r === 0 ? rnd(0x20) : r === 1 ? 0x7f + rnd(0x21) : r === 2 ? pick([0xfeff, 0x200d, 0x200c, 0x2060, 0xfffd, 0xe000, 0xf8ff, 0x10ffff, 0x1d11e, 0xe0041])
      : r === 3 ? 0x300 + rnd(0x70) : -1;
    s += cp >= 0 ? String.fromCodePoint(cp) : pick(words);
  }
  samples.push(s);
}
const alpha = 'abcdefghijklmnopqrstuvwxyz';
for (let i = 0; i < 60; i++) {   // very long words
  const len = [50, 99, 100, 101, 200, 1000, 5000][rnd(7)];
  let w = '';
  const kind = rnd(6);
  for (let k = 0; k < len; k++)
    w += kind === 0 ? alpha[rnd(26)] : kind === 1 ? String(rnd(10)) : kind === 2 ? 'ab'[k % 2]
      : kind === 3 ? pick(['ä', 'é', 'ß', 'ø']) : kind === 4 ? pick(['語', '한', 'я', 'α']) : 'a';
  samples.push(rnd(2) ? w : 'x ' + w + ' y');
}
for (let i = 0; i < 80; i++) {   // digits, contractions and punctuation runs
  let s = '';
  for (let k = 0; k < 1 + rnd(12); k++) {
    const r = rnd(4);
    s += r === 0 ? String(rnd(1e9)) + (rnd(2) ? '.' + rnd(1000) : '') : r === 1 ? pick(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL"])
      : r === 2 ? pick(['!!!', '?!', '...', '---', '((', '))', '/*', '*/', '=>', '::', '\\\\', '/']).repeat(1 + rnd(5)) : pick(words);
    s += pick([' ', '', '\n', '  ']);
  }
  samples.push(s);
}

const body = samples.map((s) => JSON.stringify(s)).join('\n') + '\n';
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out, body);
const chars = samples.reduce((a, s) => a + Buffer.byteLength(s), 0);
console.error(`${out}: ${samples.length} samples, ${chars} bytes of text`);
