// errors.test.mjs — OpenAI's error shape for every error case, the API key, locality checks
// (Host / Origin), CORS, body limits and Expect: 100-continue.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startServer, post, user } from './helpers.mjs';

const srv = await startServer(['--body-limit', '1']);
const keyed = await startServer(['--api-key', 'sekret-key']);
after(async () => { await srv.stop(); await keyed.stop(); });

function errorShape(r, status, re) {
  assert.equal(r.status, status, r.text);
  assert.equal(typeof r.json.error.message, 'string');
  assert.equal(typeof r.json.error.type, 'string');
  assert.equal(r.json.error.code, status);
  if (re) assert.match(r.json.error.message, re);
}

// A raw request with any Host header (fetch does not let one set Host).
function raw(port, { method = 'GET', path = '/health', headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text, json: text ? JSON.parse(text) : null }));
    });
    req.on('error', reject);
    if (body) req.write(body);
    req.end();
  });
}

test('400 for a body that is not JSON', async () => {
  errorShape(await post(srv.url + '/v1/chat/completions', '{"messages": [', {}), 400, /JSON/);
  errorShape(await post(srv.url + '/v1/chat/completions', '[1,2]'), 400, /object/);
});

test('400 naming the field at fault', async () => {
  const cases = [
    [{ messages: user('x'), temperature: 'hot' }, /temperature/],
    [{ messages: user('x'), max_tokens: -5 }, /max_tokens/],
    [{ messages: user('x'), max_tokens: 0 }, /max_tokens/],
    [{ messages: user('x'), top_p: 2 }, /top_p/],
    [{ messages: user('x'), n: 0 }, /'n'/],
    [{ messages: user('x'), stop: 5 }, /stop/],
    [{ messages: user('x'), stop: [''] }, /stop/],
    [{ messages: user('x'), logit_bias: { abc: 1 } }, /logit_bias/],
    [{ messages: user('x'), logit_bias: { 1: 'x' } }, /logit_bias/],
    [{ messages: user('x'), seed: 1.5 }, /seed/],
    [{ messages: user('x'), stream: 'yes' }, /stream/],
    [{ messages: user('x'), top_logprobs: 3 }, /logprobs/],
    [{ messages: 'hi' }, /messages/],
    [{}, /messages/],
    [{ messages: [{ role: 'wizard', content: 'x' }] }, /role/],
    [{ messages: [{ role: 'user', content: 5 }] }, /content/],
    [{ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, /image_url/],
    [{ messages: user('x'), tools: {} }, /tools/],
    [{ messages: user('x'), tools: [{ type: 'function', function: {} }] }, /tools\[0\]\.function\.name/],
    [{ messages: user('x'), tool_choice: 'sometimes' }, /tool_choice/],
    [{ messages: user('x'), response_format: { type: 'xml' } }, /response_format/],
  ];
  for (const [body, re] of cases) errorShape(await post(srv.url + '/v1/chat/completions', body), 400, re);
  errorShape(await post(srv.url + '/v1/completions', { prompt: 42 }), 400, /prompt/);
  errorShape(await post(srv.url + '/tokenize', { content: 1 }), 400, /content/);
  errorShape(await post(srv.url + '/detokenize', { tokens: [1e9] }), 400, /tokens\[0\]/);
});

test('404 for an unknown path, 405 for a wrong method', async () => {
  errorShape(await post(srv.url + '/v1/nothing', {}), 404);
  const r = await fetch(srv.url + '/v1/chat/completions');
  assert.equal(r.status, 405);
  assert.equal((await r.json()).error.code, 405);
  const r2 = await post(srv.url + '/health', {});
  assert.equal(r2.status, 405);
});

test('413 for a body over the limit', async () => {
  const big = JSON.stringify({ messages: user('x'.repeat(2 << 20)) });
  errorShape(await post(srv.url + '/v1/chat/completions', big), 413, /limit/);
  // also when streamed in without a Content-Length (chunked)
  const r = await new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/chat/completions', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } }, (res) => {
      let t = ''; res.on('data', (d) => { t += d; }); res.on('end', () => resolve({ status: res.statusCode, t }));
    });
    req.on('error', () => resolve({ status: -1 }));
    for (let i = 0; i < 40; i++) req.write('x'.repeat(64 << 10));
    req.end();
  });
  assert.equal(r.status, 413);
  // a client that waits for 100-continue gets the 413 without sending the body
  const e = await new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/chat/completions',
      headers: { 'content-type': 'application/json', 'content-length': 5 << 20, expect: '100-continue' } });
    let continued = false;
    req.on('continue', () => { continued = true; });
    req.on('response', (res) => { res.resume(); res.on('end', () => { resolve({ continued, status: res.statusCode }); req.destroy(); }); });
    req.on('error', reject);
    req.flushHeaders();
  });
  assert.equal(e.status, 413);
  assert.equal(e.continued, false);
});

test('Expect: 100-continue is answered', async () => {
  const body = JSON.stringify({ messages: user('hi'), max_tokens: 2, temperature: 0 });
  const r = await new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/chat/completions',
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), expect: '100-continue' } });
    let continued = false;
    req.on('continue', () => { continued = true; req.end(body); });
    req.on('response', (res) => { let t = ''; res.on('data', (d) => { t += d; }); res.on('end', () => resolve({ continued, status: res.statusCode, t })); });
    req.on('error', reject);
  });
  assert.ok(r.continued);
  assert.equal(r.status, 200);
  assert.equal(JSON.parse(r.t).usage.completion_tokens, 2);
});

test('API key: 401 when missing or wrong (constant-time compare), 200 when right; /health open', async () => {
  errorShape(await post(keyed.url + '/v1/chat/completions', { messages: user('x'), max_tokens: 1 }), 401);
  errorShape(await post(keyed.url + '/v1/chat/completions', { messages: user('x'), max_tokens: 1 }, { authorization: 'Bearer wrong' }), 401);
  errorShape(await post(keyed.url + '/v1/chat/completions', { messages: user('x'), max_tokens: 1 }, { authorization: 'Bearer sekret-ke' }), 401);
  errorShape(await post(keyed.url + '/tokenize', { content: 'x' }), 401);
  const ok = await post(keyed.url + '/v1/chat/completions', { messages: user('x'), max_tokens: 1 }, { authorization: 'Bearer sekret-key' });
  assert.equal(ok.status, 200);
  assert.equal((await fetch(keyed.url + '/health')).status, 200);
  // with a key, a remote Host is fine (the key is the protection)
  const rh = await raw(keyed.port, { path: '/v1/models', headers: { host: 'example.com', authorization: 'Bearer sekret-key' } });
  assert.equal(rh.status, 200);
});

test('--api-key-file reads the key from a file', async () => {
  const fs = await import('node:fs');
  const f = (await import('node:path')).join((await import('./helpers.mjs')).TMP, 'api-key.txt');
  fs.writeFileSync(f, 'file-key-123\n');
  const s = await startServer(['--api-key-file', f]);
  try {
    assert.equal((await post(s.url + '/tokenize', { content: 'x' })).status, 401);
    assert.equal((await post(s.url + '/tokenize', { content: 'x' }, { authorization: 'Bearer file-key-123' })).status, 200);
  } finally { await s.stop(); }
});

test('without a key, a Host or Origin that is not local is refused; local origins get CORS', async () => {
  const h = await raw(srv.port, { path: '/v1/models', headers: { host: 'evil.example:8080' } });
  assert.equal(h.status, 403);
  assert.equal(h.json.error.code, 403);
  const o = await raw(srv.port, { path: '/v1/models', headers: { origin: 'http://evil.example' } });
  assert.equal(o.status, 403);
  const nul = await raw(srv.port, { path: '/v1/models', headers: { origin: 'null' } });
  assert.equal(nul.status, 403);
  for (const host of ['localhost:1234', '127.0.0.1', '[::1]:80'])
    assert.equal((await raw(srv.port, { path: '/health', headers: { host } })).status, 200, host);
  const lo = await raw(srv.port, { path: '/v1/models', headers: { origin: 'http://localhost:3000' } });
  assert.equal(lo.status, 200);
  assert.equal(lo.headers['access-control-allow-origin'], 'http://localhost:3000');
  const pre = await raw(srv.port, { method: 'OPTIONS', path: '/v1/chat/completions', headers: { origin: 'http://localhost:3000', 'access-control-request-method': 'POST' } });
  assert.equal(pre.status, 204);
  assert.match(pre.headers['access-control-allow-methods'], /POST/);
  assert.match(pre.headers['access-control-allow-headers'], /Authorization/i);
});

test('request errors are counted in /metrics only with --metrics; /metrics without it is 501', async () => {
  const r = await fetch(srv.url + '/metrics');
  assert.equal(r.status, 501);
});
