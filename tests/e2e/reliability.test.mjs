// reliability.test.mjs — the limits and the access policy of `1bit serve` (docs/reliability.md):
// the API key on every route but /health (the route list is read from the server's source, so
// a new route is covered without editing this file), forged Origin and Host headers (a web
// page elsewhere, DNS rebinding), CORS never '*', and the limits: header size (431), open
// connections and queue length (503 + Retry-After), per-request time, slow bodies, a client
// that leaves mid-stream freeing its slot.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { startServer, post, user, sleep, ROOT } from './helpers.mjs';

const KEY = 'k-123456';
const keyed = await startServer(['--api-key', KEY, '--metrics', '--embeddings']);
const open = await startServer([]);
after(async () => { await keyed.stop(); await open.stop(); });

// A raw request with any Host header (fetch does not let one set Host).
function raw(port, { method = 'GET', path: p = '/health', headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: p, headers, agent: false }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, text, json });
      });
    });
    req.on('error', reject);
    if (body) req.write(body);
    req.end();
  });
}

// Every route of the server, from its one table (src/server/openai_misc.c).
function routes() {
  const src = fs.readFileSync(path.join(ROOT, 'src/server/openai_misc.c'), 'utf8');
  const out = [...src.matchAll(/\{"(GET|POST)", "([^"]+)", ob_h_\w+, (\d)\}/g)].map((m) => ({ method: m[1], path: m[2], open: m[3] === '1' }));
  assert.ok(out.length >= 20, 'route table not found');
  return out;
}

test('with --api-key, every route but /health needs the key; the key opens each', async () => {
  for (const r of routes()) {
    const body = r.method === 'POST' ? '{}' : undefined;
    const headers = body ? { 'content-type': 'application/json' } : {};
    const no = await raw(keyed.port, { method: r.method, path: r.path, headers, body });
    const isHealth = r.path === '/health' || r.path === '/v1/health';
    assert.equal(r.open, isHealth, `${r.path} open flag`);
    if (isHealth) assert.equal(no.status, 200, r.path);
    else {
      assert.equal(no.status, 401, `${r.method} ${r.path} without key: ${no.text}`);
      assert.equal(no.json.error.type, 'authentication_error');
    }
    const bad = await raw(keyed.port, { method: r.method, path: r.path, headers: { ...headers, authorization: 'Bearer nope' }, body });
    if (!isHealth) assert.equal(bad.status, 401, `${r.path} wrong key`);
    const yes = await raw(keyed.port, { method: r.method, path: r.path, headers: { ...headers, authorization: `Bearer ${KEY}` }, body });
    assert.notEqual(yes.status, 401, `${r.path} with key`);
    const xkey = await raw(keyed.port, { method: r.method, path: r.path, headers: { ...headers, 'x-api-key': KEY }, body });
    assert.notEqual(xkey.status, 401, `${r.path} with x-api-key`);
  }
  // unknown paths and wrong methods tell nothing without the key
  assert.equal((await raw(keyed.port, { path: '/v1/secret' })).status, 401);
  assert.equal((await raw(keyed.port, { path: '/v1/chat/completions' })).status, 401);
  assert.equal((await raw(keyed.port, { path: '/v1/secret', headers: { authorization: `Bearer ${KEY}` } })).status, 404);
  assert.equal((await raw(keyed.port, { path: '/props?x=1', headers: { authorization: `Bearer ${KEY}` } })).status, 200);
});

test('a page on another origin cannot use a keyed server without the key; CORS never says *', async () => {
  const evil = { origin: 'http://evil.example', host: 'evil.example:8080' };
  for (const p of ['/v1/models', '/props', '/slots', '/metrics']) {
    const r = await raw(keyed.port, { path: p, headers: evil });
    assert.equal(r.status, 401, p);
    assert.notEqual(r.headers['access-control-allow-origin'], '*');
    assert.equal(r.headers['access-control-allow-credentials'], undefined);
  }
  const c = await raw(keyed.port, { method: 'POST', path: '/v1/chat/completions', headers: { ...evil, 'content-type': 'text/plain' },
    body: JSON.stringify({ messages: user('x'), max_tokens: 1 }) });
  assert.equal(c.status, 401);
  // the preflight tells the browser which headers it may send, no more: no data, no credentials
  const pre = await raw(keyed.port, { method: 'OPTIONS', path: '/v1/chat/completions', headers: { ...evil, 'access-control-request-method': 'POST' } });
  assert.equal(pre.status, 204);
  assert.equal(pre.text, '');
  assert.equal(pre.headers['access-control-allow-origin'], 'http://evil.example');
  assert.equal(pre.headers['access-control-allow-credentials'], undefined);
  // a page that was given the key may use it
  const ok = await raw(keyed.port, { path: '/v1/models', headers: { ...evil, authorization: `Bearer ${KEY}` } });
  assert.equal(ok.status, 200);
  assert.equal(ok.headers['access-control-allow-origin'], 'http://evil.example');
  assert.equal(ok.headers['access-control-allow-credentials'], undefined);
});

test('without a key: forged Host (DNS rebinding) and Origin are refused, names that only look local too', async () => {
  const refused = ['evil.example', '127.0.0.1.evil.example', '127.0.0.1.nip.io:8080', 'localhost.evil.example', 'localhost.',
    '0.0.0.0', '10.0.0.1', '[::2]:80', '127.1', 'example.com@127.0.0.1'];
  for (const host of refused) {
    const r = await raw(open.port, { path: '/v1/models', headers: { host } });
    assert.equal(r.status, 403, `Host ${JSON.stringify(host)}: ${r.status}`);
    assert.equal(r.headers['access-control-allow-origin'], undefined);
  }
  for (const origin of ['http://evil.example', 'http://127.0.0.1.evil.example', 'http://localhost.evil.example:3000', 'null', 'file://']) {
    const r = await raw(open.port, { path: '/v1/models', headers: { origin } });
    assert.equal(r.status, 403, `Origin ${origin}`);
    const pre = await raw(open.port, { method: 'OPTIONS', path: '/v1/chat/completions', headers: { origin, 'access-control-request-method': 'POST' } });
    assert.equal(pre.status, 403, `preflight from ${origin}`);
    assert.equal(pre.headers['access-control-allow-origin'], undefined);
  }
  for (const host of ['localhost', 'LOCALHOST:1', '127.0.0.1:9', '127.8.9.10', '[::1]', '[::ffff:127.0.0.1]:80'])
    assert.equal((await raw(open.port, { path: '/v1/models', headers: { host } })).status, 200, host);
  const lo = await raw(open.port, { path: '/v1/models', headers: { origin: 'http://127.0.0.1:5173' } });
  assert.equal(lo.status, 200);
  assert.equal(lo.headers['access-control-allow-origin'], 'http://127.0.0.1:5173');
});

test('headers over --max-header-size get 431; the server goes on', async () => {
  const s = await startServer(['--max-header-size', '2048']);
  try {
    const r = await raw(s.port, { path: '/health', headers: { 'x-pad': 'a'.repeat(4000) } });
    assert.equal(r.status, 431);
    assert.match(r.json.error.message, /max-header-size/);
    const many = {};
    for (let i = 0; i < 100; i++) many[`x-h${i}`] = 'v'.repeat(30);
    assert.equal((await raw(s.port, { path: '/health', headers: many })).status, 431);
    assert.equal((await raw(s.port, { path: '/health?' + 'q'.repeat(3000) })).status, 431);
    assert.equal((await raw(s.port, { path: '/health', headers: { 'x-pad': 'a'.repeat(1000) } })).status, 200);
  } finally { await s.stop(); }
});

test('connections over --max-connections get 503 with Retry-After, and are served again once others close', async () => {
  const s = await startServer(['--max-connections', '4']);
  const idle = [];
  try {
    for (let i = 0; i < 5; i++) {
      const sock = net.connect(s.port, '127.0.0.1');
      await new Promise((r) => sock.on('connect', r));
      idle.push(sock);
    }
    await sleep(200);
    const r = await raw(s.port, { path: '/health' });
    assert.equal(r.status, 503);
    assert.equal(r.headers['retry-after'], '1');
    assert.match(r.json.error.message, /max-connections/);
    for (const sock of idle) sock.destroy();
    await sleep(300);
    assert.equal((await raw(s.port, { path: '/health' })).status, 200);
  } finally { for (const sock of idle) sock.destroy(); await s.stop(); }
});

test('a full queue answers 503 with Retry-After at once', async () => {
  const s = await startServer(['-np', '1', '--max-queue', '1', '-t', '1']);
  try {
    const body = { prompt: 'Once upon a time', max_tokens: 400, ignore_eos: true, temperature: 0 };
    const rs = await Promise.all([0, 1, 2, 3].map(() => post(s.url + '/v1/completions', body)));
    const busy = rs.filter((r) => r.status === 503);
    assert.ok(busy.length >= 1, rs.map((r) => r.status).join(','));
    assert.ok(rs.some((r) => r.status === 200));
    for (const r of busy) {
      assert.equal(r.headers.get('retry-after'), '1');
      assert.match(r.json.error.message, /queue is full/);
    }
  } finally { await s.stop(); }
});

test('--request-timeout ends a long generation as finish_reason length', async () => {
  const s = await startServer(['--request-timeout', '1', '-t', '1']);
  try {
    const t0 = Date.now();
    const r = await post(s.url + '/v1/completions', { prompt: 'Once', max_tokens: 100000, ignore_eos: true, n: 4 });
    const ms = Date.now() - t0;
    assert.equal(r.status, 200, r.text);
    for (const c of r.json.choices) assert.equal(c.finish_reason, 'length');
    assert.ok(ms < 3000, `took ${ms} ms`);
  } finally { await s.stop(); }
});

test('a body that trickles in past --request-timeout is cut off; the server goes on', async () => {
  const s = await startServer(['--request-timeout', '1']);
  try {
    const body = JSON.stringify({ prompt: 'x', max_tokens: 1 });
    const sock = net.connect(s.port, '127.0.0.1');
    await new Promise((r) => sock.on('connect', r));
    let closed = false, got = '';
    sock.on('data', (d) => { got += d; });
    sock.on('close', () => { closed = true; });
    sock.on('error', () => {});
    sock.write(`POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
    for (let i = 0; i < body.length - 1 && !closed; i++) { sock.write(body[i]); await sleep(150); }
    assert.ok(closed, 'still open after the body dribbled for ' + body.length * 0.15 + ' s');
    assert.doesNotMatch(got, /200 OK/);
    assert.equal((await post(s.url + '/v1/completions', { prompt: 'x', max_tokens: 1 })).status, 200);
  } finally { await s.stop(); }
});

test('a client that leaves mid-stream frees its slot', async () => {
  const s = await startServer(['-np', '1']);
  try {
    const ac = new AbortController();
    const res = await fetch(s.url + '/v1/completions', { method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once', max_tokens: 100000, ignore_eos: true, stream: true }) });
    const reader = res.body.getReader();
    await reader.read();
    const busy = await (await fetch(s.url + '/slots')).json();
    assert.equal(busy[0].is_processing, true);
    ac.abort();
    let free = false;
    for (let i = 0; i < 20 && !free; i++) { await sleep(100); free = (await (await fetch(s.url + '/slots')).json())[0].is_processing === false; }
    assert.ok(free, 'slot still busy 2 s after the client left');
    const r = await post(s.url + '/v1/completions', { prompt: 'x', max_tokens: 2 });
    assert.equal(r.status, 200);
  } finally { await s.stop(); }
});
