// lemonade.test.mjs — `1bit serve` launched exactly as Lemonade launches llama-server, and the
// command line: --version, --help, unknown flags, bad values, a model that cannot load.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import OpenAI from 'openai';
import { BIN, ensureModel, freePort, runServe, sleep } from './helpers.mjs';

test('Lemonade launch: -m ABS --ctx-size --port --jinja --metrics, /health polling, 5 requests at once, SIGTERM', async () => {
  const model = path.resolve(ensureModel());
  const port = await freePort();
  const proc = spawn(BIN, ['serve', '-m', model, '--ctx-size', '1024', '--port', String(port), '--jinja', '--metrics'],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((r) => proc.on('exit', (code, sig) => r({ code, sig })));
  try {
    const url = `http://127.0.0.1:${port}`;
    let healthy = false;
    for (let i = 0; i < 200 && !healthy; i++) {
      try { healthy = (await fetch(url + '/health')).status === 200; } catch { /* not up yet */ }
      if (!healthy) await sleep(100);
    }
    assert.ok(healthy, 'became healthy: ' + log);
    const client = new OpenAI({ baseURL: url + '/v1', apiKey: 'x', maxRetries: 0 });
    const replies = await Promise.all([0, 1, 2, 3, 4].map((i) => client.chat.completions.create({
      model: 'whatever', messages: [{ role: 'user', content: `request ${i}` }], max_tokens: 12, temperature: 0,
    })));
    for (const r of replies) {
      assert.equal(r.object, 'chat.completion');
      assert.equal(typeof r.choices[0].message.content, 'string');
      assert.equal(r.usage.completion_tokens, 12);
      assert.equal(r.timings.predicted_n, 12);
    }
    const metrics = await (await fetch(url + '/metrics')).text();
    assert.match(metrics, /onebit_tokens_predicted_total \d+/);
    const t0 = Date.now();
    proc.kill('SIGTERM');
    const { code } = await exited;
    assert.ok(Date.now() - t0 < 5000, 'exited within 5 s');
    assert.equal(code, 0);
  } finally {
    if (proc.exitCode === null) proc.kill('SIGKILL');
  }
});

test('SIGTERM during a long stream still exits within 5 s', async () => {
  const model = ensureModel();
  const port = await freePort();
  const proc = spawn(BIN, ['serve', '-m', model, '--port', String(port), '-c', '8192'], { stdio: 'ignore' });
  const exited = new Promise((r) => proc.on('exit', (code) => r(code)));
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 100; i++) {
    try { if ((await fetch(url + '/health')).status === 200) break; } catch { /* */ }
    await sleep(100);
  }
  const res = await fetch(url + '/v1/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'go', stream: true, temperature: 0, ignore_eos: true }), // runs until SIGTERM
  });
  const reader = res.body.getReader();
  await reader.read();
  const t0 = Date.now();
  proc.kill('SIGTERM');
  try { while (!(await reader.read()).done); } catch { /* connection closed */ }
  assert.equal(await exited, 0);
  assert.ok(Date.now() - t0 < 5000);
});

test('--version prints "version: N (commit)" and exits 0 at once', async () => {
  const t0 = Date.now();
  const r = await runServe(['--version']);
  assert.equal(r.code, 0);
  assert.match(r.stdout, /^version: \d+ \([0-9a-z]+\)/);
  assert.ok(Date.now() - t0 < 2000);
});

test('--help lists every flag with its help', async () => {
  const r = await runServe(['--help']);
  assert.equal(r.code, 0);
  for (const f of ['--model', '--port', '--host', '--ctx-size', '--parallel', '--threads', '--batch-size', '--ubatch-size',
    '--device', '--n-gpu-layers', '--jinja', '--chat-template-file', '--alias', '--api-key', '--api-key-file', '--metrics',
    '--embeddings', '--reranking', '--timeout', '-hf', '--version'])
    assert.ok(r.stdout.includes(f), f);
});

test('an unknown flag or a bad value is an error naming it', async () => {
  let r = await runServe(['-m', 'x.gguf', '--frobnicate']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /--frobnicate/);
  r = await runServe(['-m', 'x.gguf', '--port', 'eighty']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /--port.*eighty/);
  r = await runServe(['-m', 'x.gguf', '-np', '0']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /-np/);
  r = await runServe(['-m', 'x.gguf', '--ctx-size']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /--ctx-size/);
  r = await runServe(['-m', 'x.gguf', '--temp', 'warm']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /--temp/);
  r = await runServe(['-m', 'x.gguf', '--mmproj', 'v.gguf']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /--mmproj/);
  r = await runServe(['-m', 'x.gguf', '-hf', 'acme/x-GGUF']); // (no model at all serves the built-in one: demo.test.mjs)
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /-hf/);
});

test('llama-server flags are accepted: -ngl, -ub, -t, -b, --alias, --jinja, -np', async () => {
  const port = await freePort();
  const p = spawn(BIN, ['serve', '-m', ensureModel(), '--port', String(port), '-ngl', '99', '-ub', '256', '-t', '2', '-b', '256',
    '--alias', 'tiny', '--jinja', '-np', '2', '--timeout', '30', '--temp', '0', '-n', '5', '--top-k', '20', '--keep', '16',
    '--no-webui', '-fa', 'on', '--flash-attn=auto'], { stdio: 'ignore' });
  try {
    let ok = false;
    for (let i = 0; i < 100 && !ok; i++) {
      try { ok = (await fetch(`http://127.0.0.1:${port}/health`)).status === 200; } catch { /* */ }
      if (!ok) await sleep(100);
    }
    assert.ok(ok);
    const models = await (await fetch(`http://127.0.0.1:${port}/v1/models`)).json();
    assert.equal(models.data[0].id, 'tiny');
    // --temp 0 and -n 5 are the request defaults; a request's own fields win
    const ask = async (extra) => (await fetch(`http://127.0.0.1:${port}/v1/completions`, { method: 'POST',
      body: JSON.stringify({ prompt: 'hello', ...extra }) })).json();
    const [a, b, c] = [await ask({}), await ask({}), await ask({ max_tokens: 2 })];
    assert.equal(a.usage.completion_tokens, 5);
    assert.equal(a.choices[0].text, b.choices[0].text);
    assert.equal(c.usage.completion_tokens, 2);
    const props = await (await fetch(`http://127.0.0.1:${port}/props`)).json();
    assert.equal(props.default_generation_settings.params.top_k, 20);
    assert.equal(props.default_generation_settings.params.n_predict, 5);
  } finally {
    p.kill('SIGTERM');
  }
});

test('a model that cannot be loaded exits non-zero with the reason', async () => {
  const r = await runServe(['-m', '/nonexistent/model.gguf', '--port', String(await freePort())]);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /nonexistent/);
});
