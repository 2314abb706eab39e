// demo.test.mjs — the demo model's real text through the server. Whatever MODEL is, this serves
// the trained demo model (models/demo-tq2_0.gguf, docs/demo-model.md) and checks it against
// transformers: tests/demo/greedy.json holds the greedy continuations of held-out sentences
// computed from the checkpoint the GGUF was converted from. Its "text" cases must come back
// exactly (as in test_demo.c); a chat reply must be English that ends on its own or at the
// limit. `1bit serve` with no model serves the same model, built into the binary.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, post, DEMO_MODEL, ROOT } from './helpers.mjs';

const ref = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests/demo/greedy.json'), 'utf8'));
const texts = ref.cases.filter((c) => c.kind === 'text');
const chats = ref.cases.filter((c) => c.kind === 'chat');
const srv = await startServer(['-np', '2', '-c', '512'], { model: DEMO_MODEL });
after(async () => { await srv.stop(); });

test('completions: held-out sentences continue exactly as in transformers (temperature 0)', async () => {
  assert.ok(texts.length >= 3);
  const meta = (await srv.client.models.list()).data[0].meta;
  assert.equal(meta.arch, 'bitnet-b1.58');
  assert.equal(meta.n_vocab, 8192);
  for (const c of texts) {
    const r = await srv.client.completions.create({ model: 'x', prompt: c.prompt, max_tokens: c.ternary_ids.length, temperature: 0 });
    assert.equal(r.usage.prompt_tokens, c.prompt_ids.length, c.prompt); // BOS + the same tokenization
    assert.equal(r.choices[0].text, c.ternary_text, c.prompt);
    assert.equal(r.usage.completion_tokens, c.ternary_ids.length);
  }
  // the prompt's tokens are transformers' own
  const ids = (await post(srv.url + '/tokenize', { content: texts[0].prompt, add_special: true })).json.tokens;
  assert.deepEqual(ids, texts[0].prompt_ids);
  // streamed, the same text
  const c = texts.at(-1);
  const s = await srv.client.completions.create({ model: 'x', prompt: c.prompt, max_tokens: c.ternary_ids.length, temperature: 0, stream: true });
  let text = '';
  for await (const ch of s) text += ch.choices[0]?.text || '';
  assert.equal(text, c.ternary_text);
});

// English: letters, spaces and punctuation, mostly dictionary-shaped words, some function words.
function assertEnglish(s) {
  assert.ok(s.trim().length > 0, 'non-empty');
  assert.match(s, /^[\x20-\x7e\n\u2019]+$/, 'plain text: ' + JSON.stringify(s));
  const words = s.split(/\s+/).filter(Boolean);
  const wordy = words.filter((w) => /^[A-Za-z][a-z'\u2019-]*[.,;:!?)]*$/.test(w) || /^\(?[A-Z][A-Za-z]+[.,;:!?)]*$/.test(w));
  assert.ok(wordy.length >= 0.8 * words.length, 'words: ' + JSON.stringify(s));
  assert.ok(words.some((w) => /^(the|a|an|is|are|of|to|and|in|for|it|this)$/i.test(w)), 'function words: ' + JSON.stringify(s));
}

test('chat: an English reply that ends with stop or at the limit', async () => {
  const c = chats[0];
  // the chat prompt renders and tokenizes as transformers' apply_chat_template did
  const p = await post(srv.url + '/apply-template', { messages: [{ role: 'user', content: c.prompt }] });
  const ids = (await post(srv.url + '/tokenize', { content: p.json.prompt, add_special: true })).json.tokens;
  assert.deepEqual(ids, c.prompt_ids);
  const r = await srv.client.chat.completions.create({ messages: [{ role: 'user', content: c.prompt }], max_tokens: 96, temperature: 0 });
  const m = r.choices[0].message;
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason), r.choices[0].finish_reason);
  assert.equal(r.usage.prompt_tokens, c.prompt_ids.length);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 96);
  assertEnglish(m.content);
  assert.doesNotMatch(m.content, /<\|im_(start|end)\|>/); // the turn's end is not text
});

test('`1bit serve` with no model serves the same demo model, built into the binary', async () => {
  const b = await startServer(['-c', '512'], { model: false, wait: false });
  try {
    // a build made with EMBED_MODEL= has no built-in model: it must say so
    let ok = false;
    for (let i = 0; i < 200 && !ok && b.proc.exitCode === null; i++) {
      try { ok = (await fetch(b.url + '/health')).status === 200; } catch { /* not up yet */ }
      if (!ok) await new Promise((r) => setTimeout(r, 100));
    }
    if (!ok) {
      assert.notEqual(b.proc.exitCode, null, 'neither healthy nor exited: ' + b.stderr());
      const { code } = await b.exited;
      assert.notEqual(code, 0);
      assert.match(b.stderr(), /no default model/);
      return;
    }
    const m = (await b.client.models.list()).data[0];
    assert.equal(m.id, '1bit-demo');
    assert.deepEqual(m.meta, (await srv.client.models.list()).data[0].meta);
    const c = texts[0];
    const r = await b.client.completions.create({ model: 'x', prompt: c.prompt, max_tokens: c.ternary_ids.length, temperature: 0 });
    assert.equal(r.choices[0].text, c.ternary_text);
  } finally { await b.stop(); }
});
