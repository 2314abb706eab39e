// serve_streams.mjs — does continuous batching batch? Aggregate decode speed of 1 stream vs
// N concurrent streams against a running `1bit serve` (or any llama-server-compatible URL).
//
//   node bench/serve_streams.mjs URL [STREAMS=8] [TOKENS=64]
//
// Each stream asks /v1/completions for TOKENS tokens (ignore_eos, temperature 0, a different
// short prompt each) and streams them. Reported per run:
//   wall tok/s     all generated tokens / (last token - first token), client-side
//   server tok/s   the sum over streams of the server's timings.predicted_per_second
// The ratio of the N-stream to the 1-stream wall tok/s is what docs/serve.md records.
const [url = 'http://127.0.0.1:8080', nArg = '8', tokArg = '64'] = process.argv.slice(2);
const N = Number(nArg), TOKENS = Number(tokArg);

async function stream(i) {
  const res = await fetch(url + '/v1/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: `Stream ${i}: the`, max_tokens: TOKENS, temperature: 0, ignore_eos: true, stream: true }),
  });
  const dec = new TextDecoder();
  let buf = '', first = 0, last = 0, n = 0, timings = null;
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const j = JSON.parse(ev.slice(6));
      if (j.timings) timings = j.timings;
      if (j.choices?.[0]?.text) {
        const now = performance.now();
        if (!first) first = now;
        last = now;
      }
    }
  }
  n = timings?.predicted_n ?? 0;
  return { first, last, n, tps: timings?.predicted_per_second ?? 0 };
}

async function run(k) {
  const r = await Promise.all(Array.from({ length: k }, (_, i) => stream(i)));
  const first = Math.min(...r.map((x) => x.first)), last = Math.max(...r.map((x) => x.last));
  const n = r.reduce((s, x) => s + x.n, 0);
  // the first token of each stream comes from its prompt pass: count decode steps after it
  const wall = (n - k) / ((last - first) / 1000);
  return { streams: k, tokens: n, wall_tps: wall, server_tps: r.reduce((s, x) => s + x.tps, 0) };
}

await run(1); // warm-up (page cache, threads)
const one = await run(1);
const many = await run(N);
for (const x of [one, many])
  console.log(`${x.streams} stream(s): ${x.tokens} tokens, wall ${x.wall_tps.toFixed(2)} tok/s, server sum ${x.server_tps.toFixed(2)} tok/s`);
console.log(`ratio ${N} vs 1 (wall): ${(many.wall_tps / one.wall_tps).toFixed(2)}x`);
