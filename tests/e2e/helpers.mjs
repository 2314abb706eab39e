// helpers.mjs — start a real `1bit serve` for the end-to-end tests and talk to it.
//
// The served model is one variable: MODEL (OB_E2E_MODEL overrides it). By default it is the
// tiny random-weight Qwen3 checkpoint of the golden tests converted to GGUF: its output is
// noise, but deterministic with temperature 0 or a seed, which is what these tests check.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const BIN = process.env.OB_E2E_BIN || path.join(ROOT, 'build/1bit'); // OB_E2E_BIN: e.g. a sanitizer build
export const TMP = path.join(ROOT, 'tests/tmp');
export const MODEL = process.env.OB_E2E_MODEL || path.join(TMP, 'e2e.gguf');

export function ensureModel() {
  if (fs.existsSync(MODEL)) return MODEL;
  fs.mkdirSync(path.dirname(MODEL), { recursive: true });
  execFileSync(BIN, ['convert', 'tests/golden/qwen3', '-o', MODEL, '--type', 'f32'], { cwd: ROOT, stdio: 'ignore' });
  return MODEL;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls /health every 100 ms until 200 (as Lemonade does); fails if the process exits.
export async function waitHealthy(url, proc, timeoutMs = 20000) {
  const t0 = Date.now();
  while (Date.now() - t0 < timeoutMs) {
    if (proc.exitCode !== null) throw new Error(`server exited with ${proc.exitCode}`);
    try {
      const r = await fetch(url + '/health');
      if (r.status === 200) return;
    } catch { /* not listening yet */ }
    await sleep(100);
  }
  throw new Error('server did not become healthy');
}

// Starts `1bit serve -m MODEL --port P ...extra`. Returns { url, port, proc, client, stderr(), stop() }.
export async function startServer(extra = [], { wait = true, env = {}, model = true } = {}) {
  if (model) ensureModel();
  const port = await freePort();
  const args = ['serve', ...(model ? ['-m', MODEL] : []), '--port', String(port), ...extra];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  let log = '';
  proc.stderr.on('data', (d) => { log += d; });
  const url = `http://127.0.0.1:${port}`;
  const srv = {
    url,
    port,
    proc,
    stderr: () => log,
    client: new OpenAI({ baseURL: url + '/v1', apiKey: env.KEY || 'unused', maxRetries: 0, timeout: 60000 }),
    exited: new Promise((r) => proc.on('exit', (code, sig) => r({ code, sig }))),
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return this.exited;
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
      const r = await this.exited;
      clearTimeout(t);
      return r;
    },
  };
  if (wait) await waitHealthy(url, proc);
  return srv;
}

// Runs `1bit serve ARGS` to completion; returns { code, stdout, stderr }.
export function runServe(args, timeoutMs = 10000) {
  return new Promise((resolve) => {
    const p = spawn(BIN, ['serve', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { err += d; });
    const t = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('exit', (code) => { clearTimeout(t); resolve({ code, stdout: out, stderr: err }); });
  });
}

export async function post(url, body, headers = {}) {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}

// Reads an SSE body into [{event, data}] (data parsed unless "[DONE]").
export async function readSSE(res) {
  const text = await res.text();
  const out = [];
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    let event = null, data = '';
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data += line.slice(6);
    }
    out.push({ event, data: data === '[DONE]' ? data : JSON.parse(data) });
  }
  return out;
}

export const user = (content) => [{ role: 'user', content }];

export function checkTimings(t, assert) {
  for (const k of ['prompt_n', 'prompt_ms', 'predicted_n', 'predicted_ms', 'predicted_per_second', 'cache_n'])
    assert.equal(typeof t[k], 'number', `timings.${k}`);
}
