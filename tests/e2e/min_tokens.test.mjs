// min_tokens.test.mjs — vLLM's `min_tokens`: no end-of-generation token before that many
// tokens. The EOS token is made near-certain by logit_bias, so without min_tokens the answer is
// that one token, and with min_tokens N it is N tokens and then the EOS.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, post, user } from './helpers.mjs';

const srv = await startServer();
after(async () => { await srv.stop(); });

async function eosId() {
  const props = await (await fetch(srv.url + '/props')).json();
  const r = await post(srv.url + '/tokenize', { content: props.eos_token, parse_special: true });
  assert.equal(r.json.tokens.length, 1, r.text);
  return r.json.tokens[0];
}

test('min_tokens holds off the end-of-generation token', async () => {
  const eos = await eosId();
  const ask = (extra) => post(srv.url + '/v1/chat/completions',
    { messages: user('hi'), logit_bias: { [eos]: 100 }, max_tokens: 20, temperature: 0, ...extra });
  const plain = await ask({});
  assert.equal(plain.status, 200, plain.text);
  assert.equal(plain.json.usage.completion_tokens, 1);
  const held = await ask({ min_tokens: 5 });
  assert.equal(held.status, 200, held.text);
  assert.equal(held.json.choices[0].finish_reason, 'stop');
  assert.equal(held.json.usage.completion_tokens, 6); // five held, then the EOS
});

test('min_tokens out of range is a 400', async () => {
  const r = await post(srv.url + '/v1/chat/completions', { messages: user('hi'), min_tokens: -1 });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /min_tokens/);
});
