// reasoning.test.mjs — <think> reasoning returned as reasoning_content. The template opens the
// reasoning block in the prompt (as Qwen3's and DeepSeek-R1's do), so everything a model
// writes before </think> is reasoning: with random weights and no </think>, all of it.
// (Blocks the model opens and closes itself are covered on fixed texts in test_serve.c.)
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

test('chat: text inside an open <think> block is reasoning_content, whole and streamed', async () => {
  const base = await plain.client.chat.completions.create({ messages, max_tokens: 12, temperature: 0 });
  const r = await srv.client.chat.completions.create({ messages, max_tokens: 12, temperature: 0 });
  const m = r.choices[0].message;
  assert.ok(m.reasoning_content.length > 0);
  assert.equal(m.content, '');
  assert.notEqual(m.reasoning_content, base.choices[0].message.content); // a different prompt, other noise
  const s = await srv.client.chat.completions.create({ messages, max_tokens: 12, temperature: 0, stream: true });
  let reasoning = '', content = '';
  for await (const c of s) { reasoning += c.choices[0]?.delta?.reasoning_content || ''; content += c.choices[0]?.delta?.content || ''; }
  assert.equal(reasoning, m.reasoning_content);
  assert.equal(content, '');
  const t = await post(srv.url + '/apply-template', { messages });
  assert.match(t.json.prompt, /<think>\n$/);
});

test('responses and messages: a reasoning item / thinking block', async () => {
  const r = await srv.client.responses.create({ model: 'x', input: 'Think about it.', max_output_tokens: 8, temperature: 0 });
  const item = r.output.find((o) => o.type === 'reasoning');
  assert.ok(item.content[0].text.length > 0);
  const m = await post(srv.url + '/v1/messages', { max_tokens: 8, temperature: 0, messages });
  assert.equal(m.json.content[0].type, 'thinking');
  assert.ok(m.json.content[0].thinking.length > 0);
  const res = await fetch(srv.url + '/v1/messages', { method: 'POST', body: JSON.stringify({ max_tokens: 8, temperature: 0, messages, stream: true }) });
  const ev = await readSSE(res);
  assert.ok(ev.some((e) => e.event === 'content_block_delta' && e.data.delta.type === 'thinking_delta'));
});
