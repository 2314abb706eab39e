// hf.test.mjs — `1bit serve -hf REPO[:QUANT]` against a local mock of the Hub's HTTP API:
// download into the cache, resume after a broken transfer, sha256 check, the cache reused,
// and /health answering 503 while the model is still loading.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';
import { startServer, ensureModel, TMP, sleep } from './helpers.mjs';
import { startHub } from './mock_hub.mjs';

const gguf = fs.readFileSync(ensureModel());
const hub = await startHub({
  'acme/tiny-GGUF': { 'tiny-Q8_0.gguf': gguf, 'tiny-F32.gguf': gguf, 'README.md': Buffer.from('# tiny') },
  'acme/one-GGUF': { 'one.gguf': gguf },
});
after(() => hub.close());

function cacheDir(name) {
  const d = path.join(TMP, 'hf-cache-' + name);
  fs.rmSync(d, { recursive: true, force: true });
  return d;
}
const env = { HF_ENDPOINT: '' };

test('-hf REPO:QUANT downloads the matching GGUF into the cache, verified, and serves it', async () => {
  const dir = cacheDir('a');
  env.HF_ENDPOINT = hub.url;
  const srv = await startServer(['-hf', 'acme/tiny-GGUF:q8_0', '--hf-cache', dir], { env, model: false });
  try {
    const f = path.join(dir, 'acme_tiny-GGUF_tiny-Q8_0.gguf');
    assert.ok(fs.existsSync(f));
    assert.deepEqual(fs.readFileSync(f), gguf);
    assert.equal(fs.readFileSync(f + '.sha256', 'utf8').trim(), crypto.createHash('sha256').update(gguf).digest('hex'));
    const m = await srv.client.models.list();
    assert.equal(m.data[0].id, 'acme_tiny-GGUF_tiny-Q8_0.gguf');
    const r = await srv.client.chat.completions.create({ messages: [{ role: 'user', content: 'x' }], max_tokens: 2 });
    assert.equal(r.usage.completion_tokens, 2);
  } finally { await srv.stop(); }
  // a second start finds it in the cache: no CDN request
  hub.hits.length = 0;
  const again = await startServer(['-hf', 'acme/tiny-GGUF:Q8_0', '--hf-cache', dir], { env, model: false });
  await again.stop();
  assert.ok(!hub.hits.some((h) => h.includes('/cdn/')), hub.hits.join('\n'));
  // the only GGUF of a repo needs no quant
  const one = await startServer(['-hf', 'acme/one-GGUF', '--hf-cache', dir], { env, model: false });
  await one.stop();
});

test('a broken transfer is resumed with a Range request', async () => {
  const dir = cacheDir('b');
  hub.hits.length = 0;
  hub.cut = Math.floor(gguf.length / 3);
  const srv = await startServer(['-hf', 'acme/tiny-GGUF:F32', '--hf-cache', dir], { env, model: false });
  await srv.stop();
  assert.ok(hub.hits.some((h) => h.includes(`bytes=${Math.floor(gguf.length / 3)}-`)), hub.hits.join('\n'));
  assert.match(srv.stderr(), /resuming/);
  assert.deepEqual(fs.readFileSync(path.join(dir, 'acme_tiny-GGUF_tiny-F32.gguf')), gguf);
});

test('a sha256 mismatch is an error: exit non-zero, nothing kept', async () => {
  const dir = cacheDir('c');
  hub.wrongSha = true;
  try {
    const srv = await startServer(['-hf', 'acme/tiny-GGUF:Q8_0', '--hf-cache', dir], { env, model: false, wait: false });
    const { code } = await srv.exited;
    assert.notEqual(code, 0);
    assert.match(srv.stderr(), /sha256/);
    assert.ok(!fs.existsSync(path.join(dir, 'acme_tiny-GGUF_tiny-Q8_0.gguf')));
  } finally { hub.wrongSha = false; }
});

test('unknown repository or quantization: exit non-zero naming it', async () => {
  const dir = cacheDir('d');
  let srv = await startServer(['-hf', 'acme/nothing', '--hf-cache', dir], { env, model: false, wait: false });
  assert.notEqual((await srv.exited).code, 0);
  assert.match(srv.stderr(), /404/);
  srv = await startServer(['-hf', 'acme/tiny-GGUF:Q2_K', '--hf-cache', dir], { env, model: false, wait: false });
  assert.notEqual((await srv.exited).code, 0);
  assert.match(srv.stderr(), /quantization/);
  srv = await startServer(['-hf', 'not-a-repo', '--hf-cache', dir], { env, model: false, wait: false });
  assert.notEqual((await srv.exited).code, 0);
  assert.match(srv.stderr(), /OWNER\/NAME/);
});

test('/health answers 503 while the model is loading, and generation endpoints too', async () => {
  const dir = cacheDir('e');
  hub.delayMs = 1500;
  try {
    const srv = await startServer(['-hf', 'acme/tiny-GGUF:Q8_0', '--hf-cache', dir], { env, model: false, wait: false });
    let h = null;
    for (let i = 0; i < 50 && !h; i++) { try { h = await fetch(srv.url + '/health'); } catch { await sleep(50); } }
    assert.equal(h.status, 503);
    assert.match((await h.json()).error.message, /Loading model/);
    const c = await fetch(srv.url + '/v1/chat/completions', { method: 'POST', body: '{"messages":[{"role":"user","content":"x"}]}' });
    assert.equal(c.status, 503);
    let ok = false;
    for (let i = 0; i < 100 && !ok; i++) { ok = (await fetch(srv.url + '/health')).status === 200; if (!ok) await sleep(100); }
    assert.ok(ok);
    await srv.stop();
  } finally { hub.delayMs = 0; }
});
