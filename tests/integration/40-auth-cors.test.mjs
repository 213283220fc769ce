// Auth (--api-key / RAPID_API_KEY: Bearer or x-api-key, 401 in each API's shape) and CORS.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, openai, anthropic, post } from './lib.mjs';

const servers = [];
after(async () => { for (const s of servers) assert.equal((await s.stop()).code, 0, s.log); });

const chat = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };

test('auth on: 401 in each shape, Bearer and x-api-key accepted', async () => {
  const srv = await startServer(['--api-key', 'sekret', '--cors-origins', 'http://a.example, http://b.example']);
  servers.push(srv);
  const r = await post(srv, '/v1/chat/completions', chat);
  assert.equal(r.status, 401);
  assert.equal(r.json.error.type, 'authentication_error');
  const w = await post(srv, '/v1/chat/completions', chat, { authorization: 'Bearer wrong' });
  assert.equal(w.status, 401);
  const a = await post(srv, '/v1/messages', chat, { 'anthropic-version': '2023-06-01' });
  assert.equal(a.status, 401);
  assert.equal(a.json.type, 'error');
  assert.equal(a.json.error.type, 'authentication_error');
  assert.equal((await fetch(`${srv.url}/v1/models`)).status, 401);
  assert.equal((await fetch(`${srv.url}/health`)).status, 200, 'health stays open');

  await assert.rejects(openai(srv, { apiKey: 'wrong' }).models.list(), (e) => e.status === 401);
  await assert.rejects(anthropic(srv, { apiKey: 'wrong' }).messages.create({ model: 'default', ...chat }), (e) => e.status === 401);
  const ok = await openai(srv, { apiKey: 'sekret' }).chat.completions.create({ model: 'default', ...chat });
  assert.equal(ok.object, 'chat.completion');
  const ok2 = await anthropic(srv, { apiKey: 'sekret' }).messages.create({ model: 'default', ...chat });
  assert.equal(ok2.type, 'message');
  assert.equal((await post(srv, '/v1/chat/completions', chat, { 'x-api-key': 'sekret' })).status, 200);

  // CORS with a list: the matching origin is echoed, others get no allow header
  const pre = await fetch(`${srv.url}/v1/chat/completions`, { method: 'OPTIONS', headers: {
    origin: 'http://b.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' } });
  assert.equal(pre.status, 204, 'preflight needs no key');
  assert.equal(pre.headers.get('access-control-allow-origin'), 'http://b.example');
  assert.match(pre.headers.get('access-control-allow-headers'), /authorization/);
  assert.match(pre.headers.get('access-control-allow-methods'), /POST/);
  const other = await fetch(`${srv.url}/health`, { headers: { origin: 'http://evil.example' } });
  assert.equal(other.headers.get('access-control-allow-origin'), null);
});

test('auth off by default; RAPID_API_KEY from the environment; CORS * by default', async () => {
  const open = await startServer();
  servers.push(open);
  assert.equal((await post(open, '/v1/chat/completions', chat)).status, 200);
  const pre = await fetch(`${open.url}/v1/messages`, { method: 'OPTIONS', headers: { origin: 'http://x.example' } });
  assert.equal(pre.status, 204);
  assert.equal(pre.headers.get('access-control-allow-origin'), '*');
  const r = await fetch(`${open.url}/v1/models`, { headers: { origin: 'http://x.example' } });
  assert.equal(r.headers.get('access-control-allow-origin'), '*');

  const env = await startServer([], { RAPID_API_KEY: 'fromenv' });
  servers.push(env);
  assert.equal((await post(env, '/v1/chat/completions', chat)).status, 401);
  assert.equal((await post(env, '/v1/chat/completions', chat, { authorization: 'Bearer fromenv' })).status, 200);
  const flag = await startServer(['--api-key', 'fromflag'], { RAPID_API_KEY: 'fromenv' });
  servers.push(flag);
  assert.equal((await post(flag, '/v1/chat/completions', chat, { authorization: 'Bearer fromflag' })).status, 200, 'flag wins');
});
