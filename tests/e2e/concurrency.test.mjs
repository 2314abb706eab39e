// concurrency.test.mjs — slots and batching through HTTP: 8 concurrent streams give exactly
// what each gives alone, requests queue when slots are busy, prefix reuse (cache_n), a client
// that disconnects stops its generation, /health answers during long generations.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, sleep, user } from './helpers.mjs';

const srv = await startServer(['-np', '8', '-c', '8192']);
const small = await startServer(['-np', '2', '-c', '1024']);
after(async () => { await srv.stop(); await small.stop(); });

const ask = (client, i, extra = {}) => client.chat.completions.create({
  messages: user(`Story number ${i}: once upon a time`), temperature: 0, max_tokens: 20, ...extra,
});

async function streamText(client, i) {
  const s = await ask(client, i, { stream: true });
  let text = '', last = null;
  for await (const c of s) { text += c.choices[0]?.delta?.content || ''; last = c; }
  return { text, last };
}

test('8 concurrent streams: each identical to its solo run, all with usage and timings', async () => {
  const solo = [];
  for (let i = 0; i < 8; i++) solo.push((await ask(srv.client, i)).choices[0].message.content);
  assert.ok(new Set(solo).size > 1, 'prompts give different outputs');
  const t0 = Date.now();
  const got = await Promise.all([0, 1, 2, 3, 4, 5, 6, 7].map((i) => streamText(srv.client, i)));
  for (let i = 0; i < 8; i++) {
    assert.equal(got[i].text, solo[i], `stream ${i}`);
    assert.equal(got[i].last.usage.completion_tokens, 20);
    assert.equal(got[i].last.timings.predicted_n, 20);
  }
  assert.ok(Date.now() - t0 < 30000);
});

test('more requests than slots queue and all complete', async () => {
  const r = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => ask(small.client, i, { max_tokens: 8 })));
  for (const x of r) assert.equal(x.usage.completion_tokens, 8);
});

test('a repeated prompt reuses the cached prefix (cache_n, cached_tokens)', async () => {
  const msgs = user('A long shared prefix that the second request should find in the slot cache. '.repeat(3));
  const a = await small.client.chat.completions.create({ messages: msgs, max_tokens: 2, temperature: 0 });
  const b = await small.client.chat.completions.create({ messages: msgs, max_tokens: 2, temperature: 0 });
  assert.equal(b.timings.cache_n, b.usage.prompt_tokens - 1); // all but the last prompt token
  assert.equal(b.usage.prompt_tokens_details.cached_tokens, b.timings.cache_n);
  assert.ok(b.timings.prompt_n < a.timings.prompt_n);
});

async function slotsBusy(url) {
  return (await (await fetch(url + '/slots')).json()).filter((s) => s.is_processing).length;
}

test('a client that disconnects mid-stream stops its generation', async () => {
  const ac = new AbortController();
  const res = await fetch(srv.url + '/v1/completions', {
    method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
    // until the 8192 context is full: ignore_eos, as a trained model may end its text early
    body: JSON.stringify({ prompt: 'never ending', stream: true, temperature: 0, ignore_eos: true }),
  });
  const reader = res.body.getReader();
  for (let i = 0; i < 3; i++) await reader.read();
  assert.equal(await slotsBusy(srv.url), 1);
  // /health answers while the generation runs
  const t0 = Date.now();
  assert.equal((await fetch(srv.url + '/health')).status, 200);
  assert.ok(Date.now() - t0 < 1000);
  ac.abort();
  let busy = 1;
  for (let i = 0; i < 250 && busy; i++) { await sleep(20); busy = await slotsBusy(srv.url); }
  assert.equal(busy, 0, 'slot freed after the disconnect');
  // the same for a non-streamed request
  const ac2 = new AbortController();
  const p = fetch(srv.url + '/v1/completions', { method: 'POST', signal: ac2.signal, body: JSON.stringify({ prompt: 'again', temperature: 0, ignore_eos: true }) }).catch(() => null);
  busy = 0;
  for (let i = 0; i < 500 && !busy; i++) { await sleep(10); busy = await slotsBusy(srv.url); }
  assert.equal(busy, 1, 'the non-streamed generation runs');
  ac2.abort();
  await p;
  for (let i = 0; i < 250 && busy; i++) { await sleep(20); busy = await slotsBusy(srv.url); }
  assert.equal(busy, 0);
});
