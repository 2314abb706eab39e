// helpers.mjs — start a real `1bit serve` for the end-to-end tests and talk to it.
//
// The served model is one variable: MODEL (OB_E2E_MODEL overrides it). By default it is the
// trained demo model committed at models/demo-tq2_0.gguf (23M-parameter BitNet b1.58, 8192-token
// byte-level BPE with ChatML specials, context 512; docs/demo-model.md), given to -m by absolute
// path as Lemonade launches llama-server. The tests assume nothing of it beyond a ChatML chat
// template (Hermes-style tools) and a one-token "Z". They compare determinism (temperature 0
// or a seed: whole = streamed, batched = solo), outputs forced by logit_bias or a grammar, and
// sizes read from the server (/props, /v1/models, /tokenize), so any model runs them, e.g. the
// tiny random-weight Qwen3 of the golden tests (ensureModel converts it when missing):
//   OB_E2E_MODEL=tests/tmp/e2e.gguf make e2e
// demo.test.mjs serves the demo model itself whatever MODEL is, from the file and built into
// the binary, and checks its real text against transformers' (tests/demo/greedy.json).
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const BIN = process.env.OB_E2E_BIN || path.join(ROOT, 'build/1bit'); // OB_E2E_BIN: e.g. a sanitizer build
export const TMP = path.join(ROOT, 'tests/tmp');
export const DEMO_MODEL = path.join(ROOT, 'models/demo-tq2_0.gguf');
export const RANDOM_MODEL = path.join(TMP, 'e2e.gguf'); // tests/golden/qwen3 converted, random weights
// A relative OB_E2E_MODEL is taken from the current directory, else from the repository root.
const envModel = process.env.OB_E2E_MODEL;
export const MODEL = !envModel ? DEMO_MODEL
  : path.isAbsolute(envModel) || fs.existsSync(envModel) ? path.resolve(envModel) : path.join(ROOT, envModel);

// Returns MODEL; the random-weight test model is converted on first use, any other must exist.
export function ensureModel() {
  if (fs.existsSync(MODEL)) return MODEL;
  if (MODEL !== RANDOM_MODEL) throw new Error(`e2e model ${MODEL} not found (OB_E2E_MODEL)`);
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
// model: true for MODEL, a path for that file, false for no -m (-hf, or the built-in model).
export async function startServer(extra = [], { wait = true, env = {}, model = true } = {}) {
  const file = model === true ? ensureModel() : model;
  const port = await freePort();
  const args = ['serve', ...(file ? ['-m', file] : []), '--port', String(port), ...extra];
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
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGTERM');
        const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
        await this.exited;
        clearTimeout(t);
      }
      // make test-asan: a sanitizer report (a leak shows at exit) fails the test that ran it
      if (process.env.OB_E2E_SANITIZED) {
        if (!proc.stderr.closed) await new Promise((r) => proc.stderr.on('close', r));
        const m = log.match(/(ERROR: (Address|Leak)Sanitizer|runtime error:)[^\n]*/);
        if (m) throw new Error(`sanitizer report from 1bit serve ${args.join(' ')}:\n${log.slice(log.indexOf(m[0]), log.indexOf(m[0]) + 4000)}`);
      }
      return this.exited;
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
