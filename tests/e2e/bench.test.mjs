// bench.test.mjs — `1bit bench --url` (the serving benchmark) against real `1bit serve`s: the
// token counts it reports equal the server's usage and its own /metrics counter, percentiles are
// ordered, aggregate rates are tokens (or requests) over wall time, the chart is well-formed
// XML/SVG, `--compare` measures two servers in one run, `--api completions` uses /v1/completions
// (both servers, and a fake one that checks the body), `bench plot` overlays files, and bad
// targets (unreachable, not JSON, not a stream, cut streams, HTTP errors) give reasons, not crashes.
// Also the model benchmark's depth (-d) and parallel sequences (-npl): its test matrix and labels.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { BIN, DEMO_MODEL, TMP, startServer } from './helpers.mjs';

const srv = await startServer(['--metrics', '-np', '4']);
const srv2 = await startServer(['-np', '2']);
after(async () => { await srv.stop(); await srv2.stop(); });
fs.mkdirSync(TMP, { recursive: true });
const tmp = (name) => path.join(TMP, `bench-${process.pid}-${name}`);

// Runs `1bit ARGS`; resolves { code, stdout, stderr } whatever the exit status.
function run(args, timeoutMs = 120000) {
  return new Promise((resolve) => {
    execFile(BIN, args, { timeout: timeoutMs, maxBuffer: 1 << 24 }, (err, stdout, stderr) => {
      resolve({ code: err ? (err.code ?? -1) : 0, stdout, stderr });
    });
  });
}

async function metric(url, name) {
  const text = await (await fetch(url + '/metrics')).text();
  const m = text.match(new RegExp(`^onebit_${name} ([0-9.e+]+)$`, 'm'));
  assert.ok(m, `metric ${name} in /metrics`);
  return Number(m[1]);
}

// A small well-formedness check of XML (no dependency): balanced tags, quoted attributes,
// known entities only, one root element. Returns the root's name and the count of each tag.
function parseXml(s) {
  s = s.replace(/^<\?xml[^?]*\?>\s*/, '');
  const re = /<(\/?)([A-Za-z_][\w:.-]*)((?:\s+[\w:.-]+\s*=\s*"[^"<]*")*)\s*(\/?)>|<!--[\s\S]*?-->|([^<]+)|(<)/g;
  const badEntity = /&(?!(?:amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);)/;
  const stack = [], count = {};
  let root = null, m, end = 0;
  while ((m = re.exec(s))) {
    if (m.index !== end) throw new Error(`unparsed text at ${end}`);
    end = re.lastIndex;
    if (m[6]) throw new Error(`stray '<' at ${m.index}: ${s.slice(m.index, m.index + 40)}`);
    if (m[5] !== undefined) {
      if (badEntity.test(m[5])) throw new Error(`bad entity in text: ${m[5].slice(0, 40)}`);
      if (!stack.length && m[5].trim()) throw new Error('text outside the root');
      continue;
    }
    if (!m[2]) continue; // comment
    if (m[3] && badEntity.test(m[3])) throw new Error(`bad entity in attributes of <${m[2]}>`);
    if (m[1]) {
      const open = stack.pop();
      if (open !== m[2]) throw new Error(`</${m[2]}> closes <${open}>`);
      continue;
    }
    count[m[2]] = (count[m[2]] || 0) + 1;
    if (!stack.length) {
      if (root) throw new Error('two root elements');
      root = m[2];
    }
    if (!m[4]) stack.push(m[2]);
  }
  if (end !== s.length) throw new Error(`unparsed text at ${end}`);
  if (stack.length) throw new Error(`unclosed <${stack.pop()}>`);
  return { root, count };
}

const ordered = (d, what) => {
  assert.ok(d.p50 <= d.p90 && d.p90 <= d.p99 && d.p99 <= d.max, `${what}: p50 <= p90 <= p99 <= max (${JSON.stringify(d)})`);
};
const near = (a, b, rel, what) => assert.ok(Math.abs(a - b) <= rel * Math.abs(b), `${what}: ${a} vs ${b}`);

test('a sweep: counts equal the server\'s usage and /metrics, percentiles ordered, rates consistent, SVG valid', async () => {
  const json = tmp('a.json'), svg = tmp('a.svg');
  const before = await metric(srv.url, 'tokens_predicted_total');
  const GEN = 12, PROMPT = 48, REQ = 6;
  const r = await run(['bench', '--url', srv.url + '/v1', '--prompt-tokens', String(PROMPT), '--gen-tokens', String(GEN),
    '--concurrency', '1,2,4', '--requests', String(REQ), '-o', json, '--svg', svg, '--label', '1bit']);
  assert.equal(r.code, 0, r.stderr);
  const after_ = await metric(srv.url, 'tokens_predicted_total');
  assert.match(r.stdout, /\| concurrency \| ok \| failed \|/);
  const doc = JSON.parse(fs.readFileSync(json, 'utf8'));
  assert.equal(doc.targets.length, 1);
  assert.equal(doc.settings.api, 'chat');
  const T = doc.targets[0];
  assert.equal(T.label, '1bit');
  assert.deepEqual(T.steps.map((s) => s.concurrency), [1, 2, 4]);
  let total = 0;
  for (const s of T.steps) {
    const at = `concurrency ${s.concurrency}`;
    assert.equal(s.requests_failed, 0, at);
    assert.deepEqual(s.errors, [], at);
    assert.equal(s.requests_ok, REQ, at);
    // ignore_eos + max_tokens: the server's usage says exactly GEN for every request
    assert.equal(s.token_source, 'usage', at);
    assert.equal(s.requests_with_usage, REQ, at);
    assert.equal(s.output_tokens, REQ * GEN, at);
    assert.equal(s.output_tokens_per_request.p50, GEN, at);
    assert.equal(s.output_tokens_per_request.max, GEN, at);
    assert.ok(s.stream_deltas > 0 && s.stream_deltas <= s.output_tokens, at);
    const perReq = s.prompt_tokens / s.requests_ok;
    assert.ok(Math.abs(perReq - PROMPT) <= 0.1 * PROMPT, `${at}: prompt ${perReq} tokens for ${PROMPT}`);
    // prompts differ per request and per step: the server can reuse at most the template's prefix
    assert.ok(s.prompt_tokens_cached <= 0.5 * s.prompt_tokens, `${at}: ${s.prompt_tokens_cached} cached`);
    for (const k of ['ttft_ms', 'itl_ms', 'e2e_ms', 'decode_tokens_per_s']) ordered(s[k], `${at} ${k}`);
    assert.equal(s.ttft_ms.n, REQ);
    near(s.output_tokens_per_s, s.output_tokens / s.wall_s, 1e-6, `${at} output tok/s`);
    near(s.requests_per_s, s.requests_ok / s.wall_s, 1e-6, `${at} req/s`);
    assert.ok(s.ttft_ms.max <= s.e2e_ms.max, at);
    assert.ok(s.e2e_ms.max <= s.wall_s * 1000 + 1e-6, `${at}: no request outlasts the step`);
    // the per-request decode rate cannot exceed what its ITL samples allow on average
    assert.ok(s.decode_tokens_per_s.p50 > 0, at);
    total += s.output_tokens;
  }
  // every generated token, the unmeasured set-up requests included, is one the server counted
  assert.equal(after_ - before, total + T.setup.completion_tokens);
  const x = parseXml(fs.readFileSync(svg, 'utf8'));
  assert.equal(x.root, 'svg');
  assert.ok(x.count.polyline >= 4, 'a line per panel (+ p99)');
  assert.equal(x.count.circle, 4 * 3, 'a point per step in each of 4 lines');

  // bench plot overlays files: one line per file, labelled by file name
  const json2 = tmp('b.json'), plot = tmp('ab.svg');
  fs.copyFileSync(json, json2);
  const p = await run(['bench', 'plot', json, json2, '-o', plot]);
  assert.equal(p.code, 0, p.stderr);
  const ptext = fs.readFileSync(plot, 'utf8');
  const px = parseXml(ptext);
  assert.equal(px.root, 'svg');
  assert.equal(px.count.circle, 2 * 4 * 3);
  assert.ok(ptext.includes(`1bit (${path.basename(json, '.json')})`) && ptext.includes(`1bit (${path.basename(json2, '.json')})`));
  const bad = await run(['bench', 'plot', svg]);
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /bench plot: .*a\.svg/);
  for (const f of [json, json2, svg, plot]) fs.rmSync(f, { force: true });
});

test('--compare --rounds 2: both servers alternating, rounds merged, ratios in the report and the JSON', async () => {
  const json = tmp('c.json');
  const r = await run(['bench', '--url', srv.url, '--compare', srv2.url + '/v1/', '--label', 'four', '--label2', 'two',
    '--prompt-tokens', '32', '--gen-tokens', '8', '--concurrency', '1,4', '--requests', '8', '--rounds', '2', '--progress',
    '-o', json]);
  assert.equal(r.code, 0, r.stderr);
  const doc = JSON.parse(fs.readFileSync(json, 'utf8'));
  assert.deepEqual(doc.targets.map((t) => t.label), ['four', 'two']);
  assert.equal(doc.targets[1].url, srv2.url + '/v1');
  for (const t of doc.targets) for (const s of t.steps) {
    assert.equal(s.requests_failed, 0);
    assert.equal(s.requests_ok, 8);
    assert.equal(s.output_tokens, 8 * 8);
    // the rounds form one timeline: the step's wall time covers its requests, not the other server's
    assert.ok(s.e2e_ms.max <= s.wall_s * 1000 + 1e-6);
    near(s.output_tokens_per_s, s.output_tokens / s.wall_s, 1e-6, 'rate');
  }
  assert.equal(doc.settings.rounds, 2);
  // progress lines name the server and the round, in alternating order
  const order = [...r.stderr.matchAll(/^(four|two) round (\d)\/2 c=(\d+): /gm)].map((m) => `${m[1]}${m[2]}c${m[3]}`);
  const firsts = [...new Set(order)];
  assert.deepEqual(firsts, ['four1c1', 'two1c1', 'two2c1', 'four2c1', 'two1c4', 'four1c4', 'four2c4', 'two2c4']);
  assert.equal(doc.ratios.length, 2);
  for (let k = 0; k < 2; k++) {
    const [a, b] = doc.targets.map((t) => t.steps[k]);
    near(doc.ratios[k].output_tokens_per_s, a.output_tokens_per_s / b.output_tokens_per_s, 1e-6, 'ratio');
  }
  assert.match(r.stdout, /### four \/ two/);
  fs.rmSync(json, { force: true });
});

test('--api completions: /v1/completions with the same prompt, counts equal usage and /metrics, --compare too', async () => {
  const json = tmp('api.json');
  const before = await metric(srv.url, 'tokens_predicted_total');
  const GEN = 10, PROMPT = 40, REQ = 4;
  let r = await run(['bench', '--url', srv.url + '/v1/completions', '--api', 'completions', '--prompt-tokens', String(PROMPT),
    '--gen-tokens', String(GEN), '--concurrency', '1,2', '--requests', String(REQ), '-o', json, '--label', '1bit']);
  assert.equal(r.code, 0, r.stderr);
  const after_ = await metric(srv.url, 'tokens_predicted_total');
  assert.match(r.stdout, /### 1bit — .*\/v1 \(model .*, api completions\)/);
  let doc = JSON.parse(fs.readFileSync(json, 'utf8'));
  assert.equal(doc.settings.api, 'completions');
  const T = doc.targets[0];
  assert.equal(T.url, srv.url + '/v1', 'the endpoint is cut from the URL');
  // no chat template around the prompt: only BOS and the lead-in come on top of the words
  assert.ok(T.prompt.template_tokens < 5, `template ${T.prompt.template_tokens} tokens`);
  let total = 0;
  for (const s of T.steps) {
    const at = `concurrency ${s.concurrency}`;
    assert.equal(s.requests_failed, 0, `${at}: ${JSON.stringify(s.errors)}`);
    assert.equal(s.requests_ok, REQ, at);
    assert.equal(s.token_source, 'usage', at); // 1bit's completions stream reports usage
    assert.equal(s.output_tokens, REQ * GEN, at); // ignore_eos honoured on /v1/completions
    assert.ok(s.stream_deltas > 0 && s.stream_deltas <= s.output_tokens, at);
    assert.ok(Math.abs(s.prompt_tokens / REQ - PROMPT) <= 0.1 * PROMPT, `${at}: ${s.prompt_tokens / REQ} prompt tokens`);
    assert.equal(s.ttft_ms.n, REQ, at);
    total += s.output_tokens;
  }
  assert.equal(after_ - before, total + T.setup.completion_tokens);

  r = await run(['bench', '--url', srv.url, '--compare', srv2.url, '--api', 'completions', '--prompt-tokens', '24',
    '--gen-tokens', '6', '--concurrency', '2', '--requests', '4', '-o', json]);
  assert.equal(r.code, 0, r.stderr);
  doc = JSON.parse(fs.readFileSync(json, 'utf8'));
  assert.equal(doc.settings.api, 'completions');
  for (const t of doc.targets) for (const s of t.steps) {
    assert.equal(s.requests_ok, 4);
    assert.equal(s.output_tokens, 4 * 6);
  }
  assert.equal(doc.ratios.length, 1);
  fs.rmSync(json, { force: true });

  // a replay (chat messages) or another API is refused
  r = await run(['bench', '--url', srv.url, '--api', 'responses']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--api 'responses': expected chat or completions/);
  r = await run(['bench', '--url', srv.url, '--api', 'completions', '--replay', tmp('chats.jsonl')]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--replay .*needs --api chat/);
});

test('--api completions sends prompt (not messages) to /completions, and counts chunks of text without usage', async () => {
  const seen = [];
  const words = (b) => b.prompt.split(' ').length; // "Text:" and n words
  const fake = http.createServer((req, res) => {
    if (req.url.endsWith('/v1/models')) { res.writeHead(200); res.end('{"data":[{"id":"m"}]}'); return; }
    let text = '';
    req.on('data', (d) => { text += d; });
    req.on('end', () => {
      const b = JSON.parse(text);
      seen.push({ url: req.url, b });
      if (req.url !== '/v1/completions' || typeof b.prompt !== 'string') { res.writeHead(404); res.end('{"error":"no"}'); return; }
      if (!b.stream) { res.writeHead(200); res.end(JSON.stringify({ usage: { prompt_tokens: 1 + words(b), completion_tokens: 1 } })); return; }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const t of ['a', '', 'b', 'c']) res.write(`data: ${JSON.stringify({ object: 'text_completion', choices: [{ index: 0, text: t, finish_reason: null }] })}\n\n`);
      res.end(`data: ${JSON.stringify({ choices: [{ index: 0, text: '', finish_reason: 'length' }] })}\n\ndata: [DONE]\n\n`);
    });
  });
  await new Promise((ok) => fake.listen(0, '127.0.0.1', ok));
  const json = tmp('fc.json');
  try {
    const r = await run(['bench', '--url', `http://127.0.0.1:${fake.address().port}`, '--api', 'completions',
      '--prompt-tokens', '30', '--gen-tokens', '5', '--concurrency', '2', '--requests', '4', '--seed', '3', '-o', json]);
    assert.equal(r.code, 0, r.stderr);
    const s = JSON.parse(fs.readFileSync(json, 'utf8')).targets[0].steps[0];
    assert.equal(s.requests_ok, 4, JSON.stringify(s.errors));
    assert.equal(s.token_source, 'stream');
    assert.equal(s.output_tokens, 4 * 3); // the chunks with non-empty text
    const calib = seen.filter((x) => !x.b.stream), streamed = seen.filter((x) => x.b.stream);
    assert.ok(calib.length >= 2 && streamed.length === 1 + 4, `${calib.length} calibration, ${streamed.length} streamed`);
    for (const { url, b } of seen) {
      assert.equal(url, '/v1/completions');
      assert.equal(b.messages, undefined);
      assert.match(b.prompt, /^Text:( \w+)+$/);
      assert.equal(b.model, 'm');
    }
    for (const { b } of streamed) {
      assert.equal(words(b), 30 - 1, 'calibrated: 1 + words = 30');
      assert.deepEqual([b.max_tokens, b.ignore_eos, b.min_tokens, b.stream_options.include_usage], [5, true, 5, true]);
    }
    assert.equal(new Set(streamed.map((x) => x.b.prompt)).size, streamed.length, 'no prompt sent twice');
  } finally { fake.close(); fs.rmSync(json, { force: true }); }
});

test('--duration bounds a step: no request starts after it, the ones in flight finish', async () => {
  const json = tmp('d.json');
  const r = await run(['bench', '--url', srv.url, '--duration', '1', '--concurrency', '2', '--prompt-tokens', '16',
    '--gen-tokens', '8', '--warmup', '0', '-o', json]);
  assert.equal(r.code, 0, r.stderr);
  const doc = JSON.parse(fs.readFileSync(json, 'utf8'));
  const s = doc.targets[0].steps[0];
  assert.equal(doc.settings.duration_s, 1);
  assert.ok(s.requests_ok >= 2 && s.requests_failed === 0, JSON.stringify(s));
  assert.equal(s.output_tokens, 8 * s.requests_ok);
  // the last request started before 1 s, so the step ends within one request's time after it
  assert.ok(s.wall_s < 1 + s.e2e_ms.max / 1000 + 0.25, `wall ${s.wall_s} s`);
  fs.rmSync(json, { force: true });
});

test('bad targets and failing requests: clear messages and counted reasons', async () => {
  // unreachable
  let r = await run(['bench', '--url', 'http://127.0.0.1:1/v1', '--timeout', '5'], 20000);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /cannot connect/);
  r = await run(['bench', '--url', 'ftp://x']);
  assert.equal(r.code, 2);
  // HTTP errors: a wrong key is fatal at set-up; a bad request in a replay is counted with its reason
  const keyed = await startServer(['--api-key', 'sekret'], { env: { KEY: 'sekret' } });
  try {
    r = await run(['bench', '--url', keyed.url, '--api-key', 'wrong']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /HTTP 401/);
    const replay = tmp('replay.jsonl');
    fs.writeFileSync(replay, [
      JSON.stringify({ messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4 }),
      JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], temperature: 'hot' }),
      '',
    ].join('\n'));
    const json = tmp('r.json');
    r = await run(['bench', '--url', keyed.url, '--api-key', 'sekret', '--replay', replay, '--concurrency', '2',
      '--requests', '6', '-o', json]);
    assert.equal(r.code, 0, r.stderr);
    const s = JSON.parse(fs.readFileSync(json, 'utf8')).targets[0].steps[0];
    assert.equal(s.requests_ok, 3);
    assert.equal(s.requests_failed, 3);
    assert.equal(s.errors.length, 1);
    assert.match(s.errors[0].reason, /^HTTP 400: .*temperature/);
    assert.equal(s.errors[0].count, 3);
    assert.ok(s.output_tokens_per_request.max <= 4);
    fs.writeFileSync(replay, '{"messages": "no"}\n');
    r = await run(['bench', '--url', keyed.url, '--replay', replay]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /replay\.jsonl:1: no 'messages' array/);
    fs.rmSync(replay, { force: true });
    fs.rmSync(json, { force: true });
  } finally { await keyed.stop(); }

  // a fake server: /v1/models is HTML on one path; chat answers plain text, or a stream cut short
  const fake = http.createServer((req, res) => {
    if (req.url === '/html/v1/models') { res.writeHead(200, { 'content-type': 'text/html' }); res.end('<html>hi</html>'); return; }
    if (req.url.endsWith('/v1/models')) { res.writeHead(200); res.end('{"data":[{"id":"m"}]}'); return; }
    req.resume();
    req.on('end', () => {
      if (req.headers.accept === 'application/json') { // calibration: 5 + 10 prompt tokens a call
        res.writeHead(200);
        res.end(`{"usage":{"prompt_tokens":${5 + (fake.calls++ % 2) * 10},"completion_tokens":1}}`);
      } else if (req.url.startsWith('/err/')) { // the server reports an error inside the stream
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: {"choices":[{"delta":{"content":"a"}}]}\n\n');
        res.end('data: {"error":{"message":"output does not match the expected format"}}\n\n');
      } else if (req.url.startsWith('/plain/')) {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end('hello, not a stream');
      } else { // /cut/: the stream dies after one chunk
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: {"choices":[{"delta":{"content":"a"}}]}\n\n');
        setTimeout(() => res.destroy(), 20);
      }
    });
  });
  fake.calls = 0;
  await new Promise((ok) => fake.listen(0, '127.0.0.1', ok));
  const base = `http://127.0.0.1:${fake.address().port}`;
  try {
    r = await run(['bench', '--url', base + '/html/v1']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /not a JSON object/);
    for (const [where, why] of [['/plain/v1', /not an event stream/], ['/cut/v1', /disconnected/]]) {
      const json = tmp('f.json');
      fake.calls = 0;
      r = await run(['bench', '--url', base + where, '--concurrency', '2', '--requests', '3', '--warmup', '0', '-o', json]);
      assert.equal(r.code, 0, r.stderr);
      const s = JSON.parse(fs.readFileSync(json, 'utf8')).targets[0].steps[0];
      assert.equal(s.requests_failed, 3, where);
      assert.match(s.errors[0].reason, why);
      assert.match(r.stdout, /Errors:/);
      fs.rmSync(json, { force: true });
    }
    // a warm-up that fails inside its stream is a warning (the steps count it); one that is not a stream is fatal
    const json = tmp('w.json');
    fake.calls = 0;
    r = await run(['bench', '--url', base + '/err/v1', '--concurrency', '1', '--requests', '2', '-o', json]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /warning: the warm-up request to .* failed inside its stream \(stream error: output does not match/);
    const s = JSON.parse(fs.readFileSync(json, 'utf8')).targets[0].steps[0];
    assert.equal(s.requests_failed, 2);
    assert.match(s.errors[0].reason, /^stream error: output does not match/);
    fs.rmSync(json, { force: true });
    fake.calls = 0;
    r = await run(['bench', '--url', base + '/plain/v1', '--concurrency', '1', '--requests', '2']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /the warm-up request to .* failed: .*not an event stream/);
  } finally { fake.close(); }
});

test('bench -m: -d fills the cache first, -npl decodes sequences together; the matrix, labels and bad counts', async () => {
  const r = await run(['bench', '-m', DEMO_MODEL, '-p', '8', '-n', '4', '-d', '0,5', '-npl', '1,3', '-r', '2', '-o', 'json']);
  assert.equal(r.code, 0, r.stderr);
  const rows = JSON.parse(r.stdout);
  const got = rows.map((x) => `${x.n_prompt}/${x.n_gen}/${x.n_depth}/${x.n_parallel}`);
  assert.deepEqual(got, ['8/0/0/1', '0/4/0/1', '0/4/0/3', '8/0/5/1', '0/4/5/1', '0/4/5/3']);
  for (const x of rows) {
    assert.equal(x.samples_ts.length, 2);
    assert.ok(x.avg_ts > 0 && x.samples_ts.every((v) => v > 0), JSON.stringify(x));
  }
  const md = await run(['bench', '-m', DEMO_MODEL, '-p', '0', '-n', '4', '-d', '5', '-npl', '3', '-r', '1']);
  assert.equal(md.code, 0, md.stderr);
  assert.match(md.stdout, /\| tg4 x3 @ d5 \| [0-9.]+ ± [0-9.]+ \|/);
  for (const bad of [['-npl', '0'], ['-npl', '9', '-b', '8'], ['-d', 'x']]) {
    const e = await run(['bench', '-m', DEMO_MODEL, '-p', '0', '-n', '2', '-r', '1', ...bad]);
    assert.equal(e.code, 2, `${bad.join(' ')}: ${e.stderr}`);
    assert.match(e.stderr, /bench: /);
  }
});
