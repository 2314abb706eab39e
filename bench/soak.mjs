#!/usr/bin/env node
// soak.mjs — a bounded soak of `1bit serve` on loopback: well-formed streaming load from
// `1bit bench --url` plus an abusive share from this script, RSS and open fds of the server
// sampled throughout, then SIGTERM under load. docs/reliability.md has the last run.
//
//   node bench/soak.mjs [--minutes 30] [--streams 32] [--abusers 4] [--bin build/1bit]
//                       [--out DIR] [--serve-args "..."] [--gen-tokens 64] [--prompt-tokens 64]
//
// The server is `1bit serve` on the embedded demo model, on 127.0.0.1 only, with its default
// limits. The well-formed load is `1bit bench --url` with --streams requests in flight for the
// whole duration (ignore_eos: each must return exactly --gen-tokens tokens). The abusive share
// is --abusers workers, each looping over: a stream dropped after its first chunk, malformed
// JSON, a body over --body-limit, invalid UTF-8, a huge max_tokens, a prompt over the context, a
// body sent slowly, a forged Host. Each abusive request must get its expected answer (status
// and shape). Every 5 s the server's VmRSS and /proc/PID/fd count are sampled. At the end,
// --streams fresh streams are started and SIGTERM is sent while they run: the server must exit
// 0 within 5 s.
//
// Pass: the server never died, every well-formed request succeeded with the right token
// count, every abusive request got its expected answer, RSS grew < 5% and fds did not grow from
// minute 5 (or 1/6 of the run when shorter) to the end, shutdown took < 5 s. Exit status 0 on
// pass, 1 on fail. Writes DIR/samples.csv, DIR/bench.json, DIR/summary.json.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const opt = { minutes: 30, streams: 32, abusers: 4, bin: path.join(ROOT, 'build/1bit'), out: path.join(ROOT, 'tests/tmp/soak'),
  'serve-args': '', 'gen-tokens': 64, 'prompt-tokens': 64 };
for (let i = 2; i < process.argv.length; i += 2) {
  const k = process.argv[i].replace(/^--/, '');
  if (!(k in opt) || i + 1 >= process.argv.length) { console.error(`soak: unknown or incomplete option ${process.argv[i]}`); process.exit(2); }
  opt[k] = typeof opt[k] === 'number' ? Number(process.argv[i + 1]) : process.argv[i + 1];
}
fs.mkdirSync(opt.out, { recursive: true });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => performance.now();
const log = (...a) => console.error(`[soak ${new Date().toISOString().slice(11, 19)}]`, ...a);

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

// ---- the server -------------------------------------------------------------------------
const port = await freePort();
const serveArgs = ['serve', '--host', '127.0.0.1', '--port', String(port), ...opt['serve-args'].split(' ').filter(Boolean)];
const server = spawn(opt.bin, serveArgs, { stdio: ['ignore', 'ignore', 'pipe'] });
let serverLog = '', serverExit = null, sigtermSent = false;
server.stderr.on('data', (d) => { serverLog += d; if (serverLog.length > 1 << 20) serverLog = serverLog.slice(-(1 << 19)); });
const exited = new Promise((r) => server.on('exit', (code, sig) => { serverExit = { code, sig, t: now() }; r(serverExit); }));
const base = `http://127.0.0.1:${port}`;
for (let i = 0; ; i++) {
  if (serverExit) { console.error(serverLog); throw new Error('server exited during start'); }
  try { if ((await fetch(base + '/health')).status === 200) break; } catch { /* not yet */ }
  if (i > 300) throw new Error('server not healthy after 30 s');
  await sleep(100);
}
const props = await (await fetch(base + '/props')).json();
const nCtx = props.default_generation_settings?.n_ctx ?? 512;
log(`server pid ${server.pid} on ${base}, n_ctx ${nCtx}; ${opt.minutes} min, ${opt.streams} streams, ${opt.abusers} abusive workers`);

// ---- sampling RSS and fds ----------------------------------------------------------------
const t0 = now();
const samples = [];
function sample() {
  try {
    const st = fs.readFileSync(`/proc/${server.pid}/status`, 'utf8');
    const rss = Number(/VmRSS:\s+(\d+)/.exec(st)[1]);
    const threads = Number(/Threads:\s+(\d+)/.exec(st)[1]);
    const fds = fs.readdirSync(`/proc/${server.pid}/fd`).length;
    samples.push({ t: (now() - t0) / 1000, rss_kb: rss, fds, threads });
  } catch { /* exited */ }
}
sample();
const sampler = setInterval(sample, 5000);

// ---- abusive share -----------------------------------------------------------------------
// One raw request; resolves { status, headers, body } or { error }.
function raw({ method = 'POST', p = '/v1/completions', headers = {}, body, slowMs = 0, abortAfterFirst = false, timeoutMs = 900000 }) {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: p, agent: false, headers }, (res) => {
      const chunks = [];
      res.on('data', (d) => {
        chunks.push(d);
        if (abortAfterFirst) { req.destroy(); resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString(), aborted: true }); }
      });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
      res.on('error', (e) => resolve({ status: res.statusCode, error: e.code || String(e) }));
    });
    req.setTimeout(timeoutMs, () => { req.destroy(new Error('client timeout')); });
    req.on('error', (e) => resolve({ error: e.code || e.message }));
    if (body === undefined) { req.end(); return; }
    if (!slowMs) { req.end(body); return; }
    const buf = Buffer.from(body);
    const step = Math.max(1, Math.ceil(buf.length / 20));
    (async () => {
      for (let i = 0; i < buf.length; i += step) { if (req.destroyed) return; req.write(buf.subarray(i, i + step)); await sleep(slowMs / 20); }
      req.end();
    })();
  });
}

const json = (o) => JSON.stringify(o);
const words = (n) => Array.from({ length: n }, (_, i) => ['the', 'cat', 'sat', 'on', 'a', 'mat', 'and', 'then', 'slept'][i % 9]).join(' ');
const isErr = (r, status, re) => r.status === status && (() => { try { const e = JSON.parse(r.body).error; return e.code === status && (!re || re.test(e.message)); } catch { return false; } })();
const isCompletion = (r) => { try { const j = JSON.parse(r.body); return r.status === 200 && typeof j.choices[0].text === 'string' && ['stop', 'length'].includes(j.choices[0].finish_reason) && j.usage.completion_tokens >= 1; } catch { return false; } };
const bigBody = Buffer.alloc(17 << 20, 'x'); // over the default --body-limit of 16 MB
// Each kind sends one request and returns [answered as expected, the response].
const CT = { 'content-type': 'application/json' };
const check = async (req, ok) => { const r = await raw(req); return [ok(r), r]; };
const kinds = {
  // a stream the client drops after its first chunk: the server cancels, the slot frees
  disconnect: () => check({ body: json({ prompt: 'Once upon a time', max_tokens: 200, stream: true, ignore_eos: true }), headers: CT, abortAfterFirst: true },
    (r) => r.status === 200 && r.aborted),
  malformed: () => check({ body: '{"prompt": "x", "max_tokens": 4,', headers: CT }, (r) => isErr(r, 400, /JSON/)),
  // the server may answer 413 and close before the client has written everything
  oversize: () => check({ body: bigBody, headers: CT }, (r) => isErr(r, 413, /limit/) || r.error === 'EPIPE' || r.error === 'ECONNRESET'),
  bad_utf8: () => check({ body: Buffer.concat([Buffer.from('{"prompt": "ab'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('", "max_tokens": 4}')]), headers: CT },
    (r) => isErr(r, 400)),
  huge_max_tokens: () => check({ body: json({ prompt: 'Hello', max_tokens: 1 << 30 }), headers: CT }, isCompletion),
  over_context: () => check({ body: json({ prompt: words(nCtx * 3), max_tokens: 4 }), headers: CT }, (r) => isErr(r, 400, /context/)),
  slow_body: () => check({ body: json({ prompt: 'Slowly', max_tokens: 4 }), headers: CT, slowMs: 3000 }, isCompletion),
  forged_host: () => check({ body: json({ prompt: 'x', max_tokens: 1 }), headers: { ...CT, host: '127.0.0.1.evil.example' } }, (r) => isErr(r, 403)),
};
const abuse = Object.fromEntries(Object.keys(kinds).map((k) => [k, { ok: 0, bad: 0, examples: [] }]));
let abusing = true;
async function abuser(w) {
  const names = Object.keys(kinds);
  for (let i = w; abusing; i++) {
    const k = names[i % names.length];
    let ok = false, r = null;
    try { [ok, r] = await kinds[k](); } catch (e) { r = { error: String(e) }; }
    if (sigtermSent && !ok) break; // cut by the shutdown
    abuse[k][ok ? 'ok' : 'bad']++;
    if (!ok && abuse[k].examples.length < 3)
      abuse[k].examples.push(`t=${((now() - t0) / 1000).toFixed(0)}s status=${r?.status} error=${r?.error} ${String(r?.body ?? '').slice(0, 200)}`);
  }
}
const abusers = Array.from({ length: opt.abusers }, (_, w) => abuser(w));

// ---- well-formed load: 1bit bench --url ----------------------------------------------------
const secs = Math.round(opt.minutes * 60);
const benchJson = path.join(opt.out, 'bench.json');
const bench = spawn(opt.bin, ['bench', '--url', base + '/v1', '--concurrency', String(opt.streams), '--duration', String(secs),
  '--requests', '100000', '--timeout', '600', '--gen-tokens', String(opt['gen-tokens']), '--prompt-tokens', String(opt['prompt-tokens']),
  '--warmup', '1', '-o', benchJson], { stdio: ['ignore', 'pipe', 'pipe'] });
let benchOut = '';
bench.stdout.on('data', (d) => { benchOut += d; });
bench.stderr.on('data', (d) => { benchOut += d; });
const benchCode = await new Promise((r) => bench.on('exit', (c) => r(c)));
log(`bench exited ${benchCode}`);

// ---- SIGTERM under load ----------------------------------------------------------------------
sample();
const streams = Array.from({ length: opt.streams }, () => raw({ body: json({ prompt: 'Once', max_tokens: 400, stream: true, ignore_eos: true }), headers: { 'content-type': 'application/json' } }));
await sleep(1500);
sample();
const tTerm = now();
const died = serverExit; // exited before we asked
sigtermSent = true;
server.kill('SIGTERM');
const killer = setTimeout(() => server.kill('SIGKILL'), 20000);
const ex = await exited;
clearTimeout(killer);
const shutdownMs = ex.t - tTerm;
abusing = false;
clearInterval(sampler);
await Promise.allSettled([...abusers, ...streams]);

// ---- report -------------------------------------------------------------------------------------
let b = null;
try { b = JSON.parse(fs.readFileSync(benchJson, 'utf8')).targets[0].steps[0]; } catch { /* bench failed */ }
const warm = Math.min(300, secs / 6);
const after = samples.filter((s) => s.t >= warm && s.t <= secs);
const first = after[0], last = after[after.length - 1];
const rssGrowth = first && last ? (last.rss_kb - first.rss_kb) / first.rss_kb * 100 : NaN;
const fdGrowth = first && last ? last.fds - first.fds : NaN;
const expectTokens = b ? b.requests_ok * opt['gen-tokens'] : 0;
const abuseBad = Object.values(abuse).reduce((a, k) => a + k.bad, 0);
const summary = {
  minutes: opt.minutes, streams: opt.streams, abusers: opt.abusers, n_ctx: nCtx, serve_args: serveArgs.slice(1).join(' '),
  crashes: died ? 1 : 0,
  server_exit: { code: ex.code, signal: ex.sig, shutdown_ms: Math.round(shutdownMs), after_sigterm: !died },
  well_formed: b ? { ok: b.requests_ok, failed: b.requests_failed, output_tokens: b.output_tokens, expected_tokens: expectTokens,
    errors: b.errors.slice(0, 5), ttft_ms_p50: b.ttft_ms.p50, ttft_ms_p99: b.ttft_ms.p99, itl_ms_p99: b.itl_ms.p99,
    e2e_ms_p50: b.e2e_ms.p50, e2e_ms_p99: b.e2e_ms.p99, output_tok_per_s: b.output_tokens_per_s } : { bench_exit: benchCode, output: benchOut.slice(-2000) },
  abusive: abuse,
  rss_kb: { start: samples[0]?.rss_kb, from: first?.rss_kb, end: last?.rss_kb, max: Math.max(...samples.map((s) => s.rss_kb)), growth_pct: +rssGrowth.toFixed(2), from_s: first?.t },
  fds: { start: samples[0]?.fds, from: first?.fds, end: last?.fds, max: Math.max(...samples.map((s) => s.fds)), growth: fdGrowth },
  threads_max: Math.max(...samples.map((s) => s.threads)),
  loadavg_end: fs.readFileSync('/proc/loadavg', 'utf8').trim(),
};
const checks = {
  no_crash: !died,
  well_formed_all_ok: !!b && b.requests_failed === 0 && b.requests_ok > 0 && b.output_tokens === expectTokens,
  abusive_all_expected: abuseBad === 0,
  rss_growth_under_5pct: rssGrowth < 5,
  no_fd_growth: fdGrowth <= 0,
  clean_shutdown_under_5s: ex.code === 0 && shutdownMs < 5000,
};
summary.checks = checks;
summary.pass = Object.values(checks).every(Boolean);
fs.writeFileSync(path.join(opt.out, 'samples.csv'), 't_s,rss_kb,fds,threads\n' + samples.map((s) => `${s.t.toFixed(1)},${s.rss_kb},${s.fds},${s.threads}`).join('\n') + '\n');
fs.writeFileSync(path.join(opt.out, 'summary.json'), JSON.stringify(summary, null, 1) + '\n');
if (!summary.pass) fs.writeFileSync(path.join(opt.out, 'server.log'), serverLog);
console.log(JSON.stringify(summary, null, 1));
process.exit(summary.pass ? 0 : 1);
