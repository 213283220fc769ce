// Every error case of the issue, with its status and each API's own shape.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, openai, anthropic, post } from './lib.mjs';

let srv;
before(async () => { srv = await startServer(['--served-model-name', 'tiny']); });
after(async () => { const e = await srv.stop(); assert.equal(e.code, 0, srv.log); });

const A = { 'anthropic-version': '2023-06-01' };
const chat = { model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };
const msg = { model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };

function openaiShape(r, status, re) {
  assert.equal(r.status, status, r.text);
  const e = r.json?.error;
  assert.ok(e, r.text);
  for (const k of ['message', 'type', 'param', 'code']) assert.ok(k in e, `${k} in ${r.text}`);
  if (re) assert.match(e.message, re);
  return e;
}

function anthropicShape(r, status, type, re) {
  assert.equal(r.status, status, r.text);
  assert.equal(r.json?.type, 'error', r.text);
  assert.equal(r.json.error.type, type, r.text);
  assert.equal(typeof r.json.error.message, 'string');
  if (re) assert.match(r.json.error.message, re);
}

test('malformed JSON', async () => {
  openaiShape(await post(srv, '/v1/chat/completions', '{"messages": ['), 400, /JSON/);
  anthropicShape(await post(srv, '/v1/messages', '{"messages": [', A), 400, 'invalid_request_error', /JSON/);
});

test('wrong types', async () => {
  const e = openaiShape(await post(srv, '/v1/chat/completions', { ...chat, temperature: 'hot' }), 400);
  assert.equal(e.param, 'temperature');
  openaiShape(await post(srv, '/v1/completions', { model: 'tiny', prompt: 5 }), 400);
  anthropicShape(await post(srv, '/v1/messages', { ...msg, max_tokens: '2' }, A), 400, 'invalid_request_error');
  anthropicShape(await post(srv, '/v1/messages', { ...msg, messages: 'hi' }, A), 400, 'invalid_request_error');
});

test('unknown model is 404 (SDKs raise NotFoundError)', async () => {
  const e = openaiShape(await post(srv, '/v1/chat/completions', { ...chat, model: 'gpt-17' }), 404, /gpt-17/);
  assert.equal(e.code, 'model_not_found');
  anthropicShape(await post(srv, '/v1/messages', { ...msg, model: 'claude-9' }, A), 404, 'not_found_error', /claude-9/);
  await assert.rejects(openai(srv).chat.completions.create({ ...chat, model: 'gpt-17' }),
    (err) => err.status === 404 && err.constructor.name === 'NotFoundError');
  await assert.rejects(anthropic(srv).messages.create({ ...msg, model: 'claude-9' }),
    (err) => err.status === 404 && err.constructor.name === 'NotFoundError');
});

test('body over --max-request-bytes is 413', async () => {
  const big = JSON.stringify({ ...chat, messages: [{ role: 'user', content: 'x'.repeat(8 * 1024 * 1024 + 10) }] });
  openaiShape(await post(srv, '/v1/chat/completions', big), 413, /8388608/);
  anthropicShape(await post(srv, '/v1/messages', big, A), 413, 'request_too_large');
});

test('prompt over the context window is 400 with both numbers', async () => {
  const long = 'hello '.repeat(700);
  const e = openaiShape(await post(srv, '/v1/chat/completions', { ...chat, messages: [{ role: 'user', content: long }] }), 400);
  assert.match(e.message, /\d+ tokens.*512 tokens/);
  assert.equal(e.code, 'context_length_exceeded');
  anthropicShape(await post(srv, '/v1/messages', { ...msg, messages: [{ role: 'user', content: long }] }, A), 400,
    'invalid_request_error', /512/);
  openaiShape(await post(srv, '/v1/completions', { model: 'tiny', prompt: long }), 400, /512/);
});

test('invalid UTF-8', async () => {
  const bad = Buffer.concat([Buffer.from('{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"'),
    Buffer.from([0xc3, 0x28, 0xff]), Buffer.from('"}]}')]);
  openaiShape(await post(srv, '/v1/chat/completions', bad), 400, /UTF-8/);
  anthropicShape(await post(srv, '/v1/messages', bad, A), 400, 'invalid_request_error', /UTF-8/);
});

test('unknown route 404, wrong method 405', async () => {
  openaiShape(await post(srv, '/v1/nothing', {}), 404);
  const r = await fetch(`${srv.url}/v1/elsewhere`, { headers: A });
  const j = await r.json();
  assert.equal(r.status, 404);
  assert.equal(j.type, 'error');
  const g = await fetch(`${srv.url}/v1/chat/completions`);
  assert.equal(g.status, 405);
  assert.match(g.headers.get('allow'), /POST/);
  assert.ok((await g.json()).error);
  const d = await fetch(`${srv.url}/v1/messages`, { method: 'DELETE', headers: A });
  assert.equal(d.status, 405);
  assert.equal((await d.json()).type, 'error');
  const p = await post(srv, '/v1/models', {});
  assert.equal(p.status, 405);
});

test('unsupported values are refused clearly', async () => {
  openaiShape(await post(srv, '/v1/chat/completions', { ...chat, n: 2 }), 400, /n/);
  openaiShape(await post(srv, '/v1/chat/completions', { ...chat, response_format: { type: 'json_schema' } }), 400);
  openaiShape(await post(srv, '/v1/chat/completions', {
    ...chat, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }] }), 400, /image_url/);
  openaiShape(await post(srv, '/v1/completions', { model: 'tiny', prompt: 'x', echo: true }), 400, /echo/);
});

test('health, root and HEAD', async () => {
  const h = await fetch(`${srv.url}/health`);
  assert.equal(h.status, 200);
  assert.deepEqual(await h.json(), { status: 'ok', model: 'tiny' });
  assert.equal((await fetch(`${srv.url}/`)).status, 200);
  const head = await fetch(`${srv.url}/`, { method: 'HEAD' });
  assert.equal(head.status, 200);
});
