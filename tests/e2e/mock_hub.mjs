// mock_hub.mjs — a local imitation of the Hugging Face Hub routes `1bit serve -hf` uses:
//   GET  /api/models/OWNER/NAME/tree/main   file listing, LFS files with {lfs: {oid: sha256, size}}
//   HEAD /OWNER/NAME/resolve/main/FILE      302 to the CDN, with X-Linked-Etag ("sha256") and X-Linked-Size
//   GET  /OWNER/NAME/resolve/main/FILE      302 to the CDN
//   GET  /cdn/FILE                          the bytes, honouring Range (206)
// Knobs per test: cut (drop the connection after N bytes of the next CDN response), delayMs
// (wait before answering the CDN), wrongSha (advertise a wrong sha256), hits (request log).
import http from 'node:http';
import crypto from 'node:crypto';

export async function startHub(files) {
  // files: { 'owner/name': { 'file.gguf': Buffer, 'README.md': Buffer } }
  const state = { cut: 0, delayMs: 0, wrongSha: false, hits: [] };
  const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x');
    state.hits.push(`${req.method} ${url.pathname}${req.headers.range ? ' ' + req.headers.range : ''}`);
    let m = url.pathname.match(/^\/api\/models\/([^/]+\/[^/]+)\/tree\/main$/);
    if (m) {
      const repo = files[m[1]];
      if (!repo) { res.writeHead(404, { 'content-type': 'application/json' }); res.end('{"error":"Repository not found"}'); return; }
      const list = Object.entries(repo).map(([path, b]) => path.endsWith('.gguf')
        ? { type: 'file', path, size: b.length, oid: 'x', lfs: { oid: state.wrongSha ? '0'.repeat(64) : sha(b), size: b.length, pointerSize: 134 } }
        : { type: 'file', path, size: b.length, oid: 'y' });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(list));
      return;
    }
    m = url.pathname.match(/^\/([^/]+\/[^/]+)\/resolve\/main\/(.+)$/);
    if (m) {
      const b = files[m[1]]?.[m[2]];
      if (!b) { res.writeHead(404); res.end(); return; }
      res.writeHead(302, { location: `/cdn/${encodeURIComponent(m[1])}/${m[2]}`, 'x-linked-etag': `"${sha(b)}"`, 'x-linked-size': String(b.length), etag: '"abc"' });
      res.end();
      return;
    }
    m = url.pathname.match(/^\/cdn\/([^/]+)\/(.+)$/);
    if (m) {
      const b = files[decodeURIComponent(m[1])]?.[m[2]];
      if (!b) { res.writeHead(404); res.end(); return; }
      if (state.delayMs) await new Promise((r) => setTimeout(r, state.delayMs));
      let start = 0;
      const range = req.headers.range?.match(/^bytes=(\d+)-$/);
      if (range) start = Number(range[1]);
      if (start >= b.length) { res.writeHead(416); res.end(); return; }
      res.writeHead(range ? 206 : 200, { 'content-length': String(b.length - start), 'accept-ranges': 'bytes',
        ...(range ? { 'content-range': `bytes ${start}-${b.length - 1}/${b.length}` } : {}) });
      if (state.cut) {
        const n = state.cut;
        state.cut = 0;
        res.write(b.subarray(start, start + n), () => res.destroy());
        return;
      }
      res.end(b.subarray(start));
      return;
    }
    res.writeHead(404);
    res.end();
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  state.url = `http://127.0.0.1:${server.address().port}`;
  state.close = () => new Promise((r) => { server.closeAllConnections?.(); server.close(r); });
  return state;
}
