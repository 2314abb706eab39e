// tools.test.mjs — tool calls end to end, per model family. A random-weight model does not
// call tools by itself, so tool_choice "required" / a named function forces a call through
// the grammar engine, in the syntax of the family the chat template teaches (Qwen3/Hermes,
// Llama 3.x, Mistral, gpt-oss harmony; the mini templates in templates/ carry each family's
// marker). The server must then parse that syntax back into tool_calls: whole, streamed, and
// in the Responses and Messages APIs.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, post, readSSE } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const families = {
  hermes: [],
  llama3: ['--chat-template-file', path.join(here, 'templates/llama3-mini.jinja')],
  mistral: ['--chat-template-file', path.join(here, 'templates/mistral-mini.jinja')],
  harmony: ['--chat-template-file', path.join(here, 'templates/harmony-mini.jinja')],
};
const servers = {};
for (const [k, args] of Object.entries(families)) servers[k] = await startServer(['-c', '4096', ...args]);
const grammar = (await (await fetch(servers.hermes.url + '/props')).json()).grammar;
after(async () => { for (const s of Object.values(servers)) await s.stop(); });

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } }, required: ['city'], additionalProperties: false } } },
  { type: 'function', function: { name: 'get_time', description: 'Time in a zone',
    parameters: { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'], additionalProperties: false } } },
];
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
const todo = grammar === false ? 'grammar engine not in this build' : false;

for (const fam of Object.keys(families)) {
  test(`${fam}: a forced call is parsed into tool_calls (named and required, whole and streamed)`, { todo }, async () => {
    const { client } = servers[fam];
    const named = await client.chat.completions.create({ messages, tools, temperature: 0, max_tokens: 300,
      tool_choice: { type: 'function', function: { name: 'get_time' } } });
    const m = named.choices[0].message;
    assert.equal(named.choices[0].finish_reason, 'tool_calls', JSON.stringify(m));
    assert.equal(m.tool_calls.length, 1);
    assert.equal(m.tool_calls[0].type, 'function');
    assert.equal(m.tool_calls[0].function.name, 'get_time');
    assert.ok(['UTC', 'CET'].includes(JSON.parse(m.tool_calls[0].function.arguments).zone));
    assert.match(m.tool_calls[0].id, fam === 'mistral' ? /^[0-9a-f]{9}$/ : /^call_/);
    const req = await client.chat.completions.create({ messages, tools, temperature: 0.8, seed: 3, max_tokens: 300, tool_choice: 'required' });
    const call = req.choices[0].message.tool_calls[0];
    assert.ok(['get_weather', 'get_time'].includes(call.function.name));
    assert.equal(typeof JSON.parse(call.function.arguments), 'object');
    // streamed: the call arrives as a tool_calls delta with index, id, name and arguments
    const s = await client.chat.completions.create({ messages, tools, temperature: 0, max_tokens: 300, stream: true,
      tool_choice: { type: 'function', function: { name: 'get_time' } } });
    const deltas = [];
    let finish = null;
    for await (const c of s) {
      for (const d of c.choices[0]?.delta?.tool_calls || []) deltas.push(d);
      finish = c.choices[0]?.finish_reason || finish;
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(deltas.length, 1);
    assert.equal(deltas[0].index, 0);
    assert.equal(deltas[0].function.name, 'get_time');
    assert.deepEqual(JSON.parse(deltas[0].function.arguments), JSON.parse(m.tool_calls[0].function.arguments));
  });
}

test('responses API: a forced call is a function_call output item, streamed too', { todo }, async () => {
  const flat = tools.map((t) => ({ type: 'function', ...t.function }));
  const { client } = servers.hermes;
  const r = await client.responses.create({ model: 'x', input: 'Weather in Rome?', tools: flat, temperature: 0, max_output_tokens: 300,
    tool_choice: { type: 'function', name: 'get_weather' } });
  const fc = r.output.find((o) => o.type === 'function_call');
  assert.equal(fc.name, 'get_weather');
  assert.ok(['Paris', 'Rome'].includes(JSON.parse(fc.arguments).city));
  assert.match(fc.call_id, /^call_/);
  const s = await client.responses.create({ model: 'x', input: 'Weather in Rome?', tools: flat, temperature: 0, max_output_tokens: 300,
    tool_choice: 'required', stream: true });
  let args = null, done = null;
  for await (const ev of s) {
    if (ev.type === 'response.function_call_arguments.done') args = ev.arguments;
    if (ev.type === 'response.completed') done = ev.response;
  }
  assert.equal(typeof JSON.parse(args), 'object');
  assert.ok(done.output.some((o) => o.type === 'function_call'));
});

test('messages API: tool_choice any gives a tool_use block, streamed too', { todo }, async () => {
  const body = { max_tokens: 300, temperature: 0, messages: [{ role: 'user', content: 'Weather?' }], tool_choice: { type: 'any' },
    tools: tools.map((t) => ({ name: t.function.name, description: t.function.description, input_schema: t.function.parameters })) };
  const r = await post(servers.hermes.url + '/v1/messages', body);
  assert.equal(r.status, 200, r.text);
  const tu = r.json.content.find((b) => b.type === 'tool_use');
  assert.ok(tu, JSON.stringify(r.json));
  assert.equal(r.json.stop_reason, 'tool_use');
  assert.equal(typeof tu.input, 'object');
  const res = await fetch(servers.hermes.url + '/v1/messages', { method: 'POST', body: JSON.stringify({ ...body, stream: true }) });
  const ev = await readSSE(res);
  assert.ok(ev.some((e) => e.event === 'content_block_start' && e.data.content_block.type === 'tool_use'));
  assert.ok(ev.some((e) => e.event === 'content_block_delta' && e.data.delta.type === 'input_json_delta'));
});

test('tool_choice "none" never parses calls; a bad forced name is a 400', async () => {
  const r = await post(servers.hermes.url + '/v1/chat/completions', { messages, tools, tool_choice: { type: 'function', function: { name: 'nope' } } });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /nope/);
  const n = await servers.hermes.client.chat.completions.create({ messages, tools, tool_choice: 'none', temperature: 0, max_tokens: 8 });
  assert.equal(n.choices[0].message.tool_calls, undefined);
});
