// endpoints.test.mjs — the endpoints that do not generate: /health, /v1/models, /tokenize,
// /detokenize, /apply-template, /props, /slots, /metrics, /v1/embeddings, /v1/completions.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, post, readSSE, MODEL, checkTimings } from './helpers.mjs';

const srv = await startServer(['--metrics', '--embeddings', '-np', '2', '-c', '1024']);
const plain = await startServer([]);
after(async () => { await srv.stop(); await plain.stop(); });

test('/health and /v1/models', async () => {
  const h = await fetch(srv.url + '/health');
  assert.equal(h.status, 200);
  assert.deepEqual(await h.json(), { status: 'ok' });
  const models = await srv.client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, path.basename(MODEL));
  assert.equal(models.data[0].object, 'model');
});

test('/tokenize and /detokenize round-trip, with pieces and special tokens', async () => {
  const text = 'Hello, wörld! 日本';
  const t = await post(srv.url + '/tokenize', { content: text });
  assert.equal(t.status, 200);
  assert.ok(t.json.tokens.length > 3);
  assert.ok(t.json.tokens.every(Number.isInteger));
  const d = await post(srv.url + '/detokenize', { tokens: t.json.tokens });
  assert.equal(d.json.content, text);
  const p = await post(srv.url + '/tokenize', { content: 'ab', with_pieces: true });
  assert.equal(p.json.tokens.map((x) => x.piece).join(''), 'ab');
  const bos = await post(srv.url + '/tokenize', { content: 'x', add_special: true });
  const nob = await post(srv.url + '/tokenize', { content: 'x' });
  assert.ok(bos.json.tokens.length >= nob.json.tokens.length);
});

test('/apply-template renders the chat prompt', async () => {
  const r = await post(srv.url + '/apply-template', { messages: [{ role: 'system', content: 'S' }, { role: 'user', content: 'U' }] });
  assert.equal(r.json.prompt, '<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n');
});

test('/props and /slots', async () => {
  const p = await (await fetch(srv.url + '/props')).json();
  assert.equal(p.total_slots, 2);
  assert.equal(p.default_generation_settings.n_ctx, 1024);
  assert.equal(typeof p.chat_template, 'string');
  assert.equal(p.model_path, MODEL);
  const s = await (await fetch(srv.url + '/slots')).json();
  assert.equal(s.length, 2);
  assert.deepEqual(s.map((x) => x.id), [0, 1]);
  assert.ok(s.every((x) => x.is_processing === false && x.n_ctx === 1024));
});

test('/metrics: Prometheus text that counts requests and tokens', async () => {
  const before = await (await fetch(srv.url + '/metrics')).text();
  const val = (t, name) => Number(t.match(new RegExp(`^onebit_${name} ([0-9.e+]+)$`, 'm'))[1]);
  await srv.client.chat.completions.create({ messages: [{ role: 'user', content: 'x' }], max_tokens: 7, temperature: 0 });
  const r = await fetch(srv.url + '/metrics');
  assert.match(r.headers.get('content-type'), /text\/plain/);
  const after = await r.text();
  assert.match(after, /# TYPE onebit_tokens_predicted_total counter/);
  assert.equal(val(after, 'tokens_predicted_total') - val(before, 'tokens_predicted_total'), 7);
  assert.ok(val(after, 'requests_total') > val(before, 'requests_total'));
  assert.equal(val(after, 'slots_total'), 2);
  assert.equal(val(after, 'slots_busy'), 0);
});

test('/v1/embeddings: one unit vector per input, deterministic; 501 without --embeddings', async () => {
  const r = await srv.client.embeddings.create({ model: 'x', input: ['hello world', 'something else', 'hello world'] });
  assert.equal(r.data.length, 3);
  const [a, b, c] = r.data.map((d) => d.embedding);
  const nEmbd = (await srv.client.models.list()).data[0].meta.n_embd; // the model's hidden size
  assert.ok(Number.isInteger(nEmbd) && nEmbd > 0);
  assert.equal(a.length, nEmbd);
  const norm = Math.sqrt(a.reduce((s, x) => s + x * x, 0));
  assert.ok(Math.abs(norm - 1) < 1e-4);
  assert.deepEqual(a, c);
  assert.notDeepEqual(a, b);
  assert.ok(r.usage.prompt_tokens > 0);
  const one = await srv.client.embeddings.create({ model: 'x', input: 'hello world' });
  assert.deepEqual(one.data[0].embedding, a);
  const f = await post(srv.url + '/v1/embeddings', { input: 'hello world', encoding_format: 'float' });
  assert.equal(f.json.data[0].embedding.length, nEmbd);
  f.json.data[0].embedding.forEach((x, i) => assert.ok(Math.abs(x - a[i]) < 1e-6));
  const no = await post(plain.url + '/v1/embeddings', { input: 'x' });
  assert.equal(no.status, 501);
  assert.match(no.json.error.message, /--embeddings/);
});

test('embeddings while generating: both exact (decodes take turns on the backend)', async () => {
  const alone = (await srv.client.embeddings.create({ model: 'x', input: 'hello world', encoding_format: 'float' })).data[0].embedding;
  const gen = () => srv.client.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 200, temperature: 0 });
  const solo = (await gen()).choices[0].text;
  const work = [gen(), gen()];
  for (let i = 0; i < 6; i++) {
    const e = (await srv.client.embeddings.create({ model: 'x', input: 'hello world', encoding_format: 'float' })).data[0].embedding;
    assert.deepEqual(e, alone);
  }
  for (const r of await Promise.all(work)) assert.equal(r.choices[0].text, solo);
});

test('/v1/completions: text, stream, echo, logprobs, stop, usage and timings', async () => {
  const c = srv.client;
  const r = await c.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 10, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.usage.completion_tokens, 10);
  assert.equal(r.choices[0].finish_reason, 'length');
  checkTimings(r.timings, assert);
  const text = r.choices[0].text;
  const s = await c.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 10, temperature: 0, stream: true });
  let st = '';
  for await (const ch of s) st += ch.choices[0]?.text || '';
  assert.equal(st, text);
  const e = await c.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 10, temperature: 0, echo: true });
  assert.equal(e.choices[0].text, 'Once upon a time' + text);
  const lp = await c.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 4, temperature: 0, logprobs: 2 });
  assert.equal(lp.choices[0].logprobs.tokens.length, 4);
  assert.equal(lp.choices[0].logprobs.token_logprobs.length, 4);
  assert.ok(lp.choices[0].logprobs.token_logprobs.every((x) => x <= 0));
  for (const top of lp.choices[0].logprobs.top_logprobs) { // keys: token texts (two tokens may share one)
    const n = Object.keys(top).length;
    assert.ok(n >= 1 && n <= 2);
  }
  const stop = text.slice(2, 6);
  const sr = await c.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 10, temperature: 0, stop });
  assert.equal(sr.choices[0].text, text.slice(0, text.indexOf(stop)));
  // a prompt of token ids
  const ids = (await post(srv.url + '/tokenize', { content: 'Once upon a time', add_special: true })).json.tokens;
  const ri = await c.completions.create({ model: 'x', prompt: ids, max_tokens: 10, temperature: 0 });
  assert.equal(ri.choices[0].text, text);
  // raw stream: the last chunk before [DONE] has usage and timings
  const res = await fetch(srv.url + '/v1/completions', { method: 'POST', body: JSON.stringify({ prompt: 'a', max_tokens: 3, stream: true }) });
  const ev = await readSSE(res);
  assert.equal(ev.at(-1).data, '[DONE]');
  assert.equal(ev.at(-2).data.usage.completion_tokens, 3);
  checkTimings(ev.at(-2).data.timings, assert);
  // include_usage: one more chunk with no choices, of the endpoint's object like every other chunk
  const ru = await fetch(srv.url + '/v1/completions', {
    method: 'POST', body: JSON.stringify({ prompt: 'a', max_tokens: 3, stream: true, stream_options: { include_usage: true } }),
  });
  const eu = await readSSE(ru);
  assert.equal(eu.at(-1).data, '[DONE]');
  assert.deepEqual(eu.at(-2).data.choices, []);
  assert.equal(eu.at(-2).data.usage.completion_tokens, 3);
  for (const x of eu.slice(0, -1)) assert.equal(x.data.object, 'text_completion');
});
