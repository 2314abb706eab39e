// reasoning.test.mjs — <think> reasoning returned as reasoning_content. The template opens the
// reasoning block in the prompt (as Qwen3's and DeepSeek-R1's do), so everything a model
// writes before </think> is reasoning. What a model writes there is its own affair (the demo
// model ends its turn at once, random weights write noise), so logit_bias +100 on "Z" forces
// the same text from any model: the plain template returns it as content, this one as
// reasoning. (Blocks the model opens and closes itself are covered on fixed texts in
// test_serve.c.)
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, post, readSSE } from './helpers.mjs';

const tmpl = path.join(path.dirname(fileURLToPath(import.meta.url)), 'templates/think-mini.jinja');
const srv = await startServer(['--chat-template-file', tmpl, '-c', '1024']);
const plain = await startServer(['-c', '1024']);
after(async () => { await srv.stop(); await plain.stop(); });
const messages = [{ role: 'user', content: 'Think about it.' }];
const z = (await post(srv.url + '/tokenize', { content: 'Z' })).json.tokens;
const force = { temperature: 0, logit_bias: { [z[0]]: 100 } };

test('chat: text inside an open <think> block is reasoning_content, whole and streamed', async () => {
  assert.equal(z.length, 1);
  const base = await plain.client.chat.completions.create({ messages, max_tokens: 12, ...force });
  assert.equal(base.choices[0].message.content, 'Z'.repeat(12));
  assert.equal(base.choices[0].message.reasoning_content, undefined);
  const r = await srv.client.chat.completions.create({ messages, max_tokens: 12, ...force });
  const m = r.choices[0].message;
  assert.equal(m.reasoning_content, 'Z'.repeat(12)); // the same text, now reasoning
  assert.equal(m.content, '');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  const s = await srv.client.chat.completions.create({ messages, max_tokens: 12, ...force, stream: true });
  let reasoning = '', content = '';
  for await (const c of s) { reasoning += c.choices[0]?.delta?.reasoning_content || ''; content += c.choices[0]?.delta?.content || ''; }
  assert.equal(reasoning, m.reasoning_content);
  assert.equal(content, '');
  const t = await post(srv.url + '/apply-template', { messages });
  assert.match(t.json.prompt, /<think>\n$/);
});

test('responses and messages: a reasoning item / thinking block', async () => {
  const r = await srv.client.responses.create({ model: 'x', input: 'Think about it.', max_output_tokens: 8, ...force });
  const item = r.output.find((o) => o.type === 'reasoning');
  assert.equal(item.content[0].text, 'Z'.repeat(8));
  assert.equal(r.output_text, '');
  const m = await post(srv.url + '/v1/messages', { max_tokens: 8, messages, ...force });
  assert.equal(m.json.content[0].type, 'thinking');
  assert.equal(m.json.content[0].thinking, 'Z'.repeat(8));
  const res = await fetch(srv.url + '/v1/messages', { method: 'POST', body: JSON.stringify({ max_tokens: 8, messages, ...force, stream: true }) });
  const ev = await readSSE(res);
  const thinking = ev.filter((e) => e.event === 'content_block_delta' && e.data.delta.type === 'thinking_delta');
  assert.ok(thinking.length > 0);
  assert.equal(thinking.map((e) => e.data.delta.thinking).join(''), 'Z'.repeat(8));
});
