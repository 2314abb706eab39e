// no_template.test.mjs — a GGUF without tokenizer.chat_template is served with ChatML (as
// llama-server does), and --chat-template-file gives it one. Regression: loading such a file
// crashed the server (chat.c copied a NULL template).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { startServer, post, user, BIN, ROOT, TMP } from './helpers.mjs';

// tests/golden/llama with the chat template taken out of its tokenizer_config.json
const dir = path.join(TMP, 'no-template');
const file = path.join(TMP, 'no-template.gguf');
fs.rmSync(dir, { recursive: true, force: true });
fs.cpSync(path.join(ROOT, 'tests/golden/llama'), dir, { recursive: true });
const cfgPath = path.join(dir, 'tokenizer_config.json');
const cfg = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
delete cfg.chat_template;
fs.writeFileSync(cfgPath, JSON.stringify(cfg));
execFileSync(BIN, ['convert', dir, '-o', file, '--type', 'f32'], { cwd: ROOT, stdio: 'ignore' });

const plain = await startServer([], { model: file });
const withFile = await startServer(['--chat-template-file', path.join(ROOT, 'bench/chatml.jinja')], { model: file });
after(async () => { await plain.stop(); await withFile.stop(); });

for (const [name, srv] of [['without a template', plain], ['with --chat-template-file', withFile]]) {
  test(`chat completion on a GGUF ${name}`, async () => {
    const r = await post(srv.url + '/v1/chat/completions', { messages: user('hi'), max_tokens: 3, temperature: 0 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.role, 'assistant');
    assert.ok(r.json.usage.prompt_tokens > 0);
    assert.equal(srv.proc.exitCode, null);
  });
}
