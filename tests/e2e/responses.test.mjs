// responses.test.mjs — POST /v1/responses (OpenAI Responses API, text and tools) and
// POST /v1/messages (Anthropic Messages API), whole and streamed.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, post, readSSE, checkTimings } from './helpers.mjs';

const srv = await startServer(['-c', '2048']);
after(async () => { await srv.stop(); });

test('responses: text in, output_text out, usage and timings', async () => {
  const r = await srv.client.responses.create({ model: 'x', input: 'Tell me a story', max_output_tokens: 8, temperature: 0 });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.output[0].role, 'assistant');
  assert.equal(typeof r.output_text, 'string');
  assert.ok(r.output_text.length > 0);
  assert.equal(r.usage.output_tokens, 8);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + 8);
  checkTimings(r.timings, assert);
  // same text as chat completions with the same conversation
  const c = await srv.client.chat.completions.create({ messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 8, temperature: 0 });
  assert.equal(r.output_text, c.choices[0].message.content);
});

test('responses: instructions and message items', async () => {
  const r = await srv.client.responses.create({
    model: 'x', instructions: 'Be brief.', temperature: 0, max_output_tokens: 4,
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'Hi' }] }, { role: 'assistant', content: 'Hello' }, { role: 'user', content: 'Again' }],
  });
  assert.equal(r.usage.output_tokens, 4);
});

test('responses: streamed events, deltas add up to the text', async () => {
  const whole = (await srv.client.responses.create({ model: 'x', input: 'Stream me', max_output_tokens: 12, temperature: 0 })).output_text;
  const stream = await srv.client.responses.create({ model: 'x', input: 'Stream me', max_output_tokens: 12, temperature: 0, stream: true });
  const types = [];
  let text = '', done = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed') done = ev.response;
  }
  assert.equal(types[0], 'response.created');
  assert.equal(types.at(-1), 'response.completed');
  for (const t of ['response.output_item.added', 'response.content_part.added', 'response.output_text.done', 'response.output_item.done'])
    assert.ok(types.includes(t), t);
  assert.equal(text, whole);
  assert.equal(done.output[0].content[0].text, whole);
  assert.equal(done.usage.output_tokens, 12);
  checkTimings(done.timings, assert);
});

test('responses: tools and a function call round trip are accepted', async () => {
  const tools = [{ type: 'function', name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } }];
  const r = await srv.client.responses.create({
    model: 'x', tools, temperature: 0, max_output_tokens: 4,
    input: [{ role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: '21 C' }],
  });
  assert.equal(r.usage.output_tokens, 4);
  const bad = await post(srv.url + '/v1/responses', { input: 'x', tools: [{ type: 'function' }] });
  assert.equal(bad.status, 400);
  assert.match(bad.json.error.message, /tools\[0\]\.name/);
});

test('messages (Anthropic): content blocks, stop_reason, usage; streamed events', async () => {
  const body = { model: 'x', max_tokens: 6, temperature: 0, system: 'Be brief.', messages: [{ role: 'user', content: 'Hello' }] };
  const r = await post(srv.url + '/v1/messages', body);
  assert.equal(r.status, 200);
  assert.equal(r.json.type, 'message');
  assert.equal(r.json.content[0].type, 'text');
  assert.equal(r.json.stop_reason, 'max_tokens');
  assert.equal(r.json.usage.output_tokens, 6);
  const res = await fetch(srv.url + '/v1/messages', { method: 'POST', body: JSON.stringify({ ...body, stream: true }) });
  const ev = await readSSE(res);
  assert.equal(ev[0].event, 'message_start');
  assert.equal(ev.at(-1).event, 'message_stop');
  assert.equal(ev.at(-1).data.usage.output_tokens, 6);
  checkTimings(ev.at(-1).data.timings, assert);
  const text = ev.filter((e) => e.event === 'content_block_delta').map((e) => e.data.delta.text).join('');
  assert.equal(text, r.json.content[0].text);
  const md = ev.find((e) => e.event === 'message_delta');
  assert.equal(md.data.delta.stop_reason, 'max_tokens');
  const bad = await post(srv.url + '/v1/messages', { messages: [{ role: 'user', content: 'x' }] });
  assert.equal(bad.status, 400);
  assert.match(bad.json.error.message, /max_tokens/);
});
