// Concurrency and lifecycle: 32 simultaneous streams, a mid-stream disconnect cancelling its
// generation at once, SSE keep-alive comments, 503 while loading, graceful shutdown.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, openai, anthropic, post, waitHealthy } from './lib.mjs';

const messages = [{ role: 'user', content: 'Tell me a story.' }];

test('32 concurrent streaming clients all complete', async (t) => {
  const srv = await startServer(['--served-model-name', 'tiny']);
  t.after(() => srv.stop());
  const oc = openai(srv), ac = anthropic(srv);
  const jobs = [];
  for (let i = 0; i < 32; i++) {
    if (i % 2 === 0) {
      jobs.push((async () => {
        const s = await oc.chat.completions.create({ model: 'tiny', messages, max_tokens: 12, seed: i, stream: true,
          stream_options: { include_usage: true } });
        let finish = null, usage = null, text = '';
        for await (const c of s) {
          if (c.usage) usage = c.usage;
          text += c.choices[0]?.delta?.content ?? '';
          finish = c.choices[0]?.finish_reason ?? finish;
        }
        assert.ok(finish && usage, `openai stream ${i} completed`);
        return usage.completion_tokens;
      })());
    } else {
      jobs.push((async () => {
        const s = ac.messages.stream({ model: 'tiny', messages, max_tokens: 12, seed: i });
        const m = await s.finalMessage();
        assert.ok(m.stop_reason, `anthropic stream ${i} completed`);
        return m.usage.output_tokens;
      })());
    }
  }
  const t0 = Date.now();
  const counts = await Promise.all(jobs);
  assert.equal(counts.length, 32);
  for (const n of counts) assert.ok(n > 0 && n <= 12);
  console.log(`32 streams in ${Date.now() - t0} ms`);
  assert.equal((await srv.stop()).code, 0, srv.log);
});

test('a mid-stream disconnect cancels its generation at once; the next request is normal', async (t) => {
  const srv = await startServer();
  t.after(() => srv.stop());
  const ctrl = new AbortController();
  const res = await fetch(`${srv.url}/v1/chat/completions`, {
    method: 'POST', signal: ctrl.signal, headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages, max_tokens: 450, stream: true }),
  });
  const reader = res.body.getReader();
  let got = '';
  while ((got.match(/data: /g) || []).length < 4) got += new TextDecoder().decode((await reader.read()).value);
  const tAbort = Date.now();
  ctrl.abort();
  // the request's log line is written after its generation ended (rp_gen_free waits for DONE)
  let line = null;
  while (!line && Date.now() - tAbort < 3000) {
    line = srv.log.split('\n').find((l) => /POST \/v1\/chat\/completions 200 .*client gone/.test(l));
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.ok(line, `no cancelled request in the log:\n${srv.log}`);
  const out = Number(/out=(\d+)/.exec(line)[1]);
  assert.ok(out < 450, `generation stopped early (${out} tokens)`);
  console.log(`cancelled after ${out} tokens, ${Date.now() - tAbort} ms after the disconnect`);
  const r = await openai(srv).chat.completions.create({ model: 'default', messages, max_tokens: 5 });
  assert.ok(r.choices[0].finish_reason);
  assert.equal((await srv.stop()).code, 0, srv.log);
});

test('SSE keep-alive comments while a stream waits for its first token', async (t) => {
  const srv = await startServer([], { RAPID_SSE_KEEPALIVE_MS: '10' });
  t.after(() => srv.stop());
  // fill every engine slot (8) so the stream below waits in the queue
  const long = Array.from({ length: 8 }, (_, i) => post(srv, '/v1/chat/completions', { messages, max_tokens: 80, seed: i }));
  await new Promise((r) => setTimeout(r, 100));
  const res = await fetch(`${srv.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages, max_tokens: 3, stream: true }),
  });
  const text = await res.text();
  for (const r of await Promise.all(long)) assert.equal(r.status, 200);
  assert.match(text, /^: keep-alive$/m, 'the waiting stream got keep-alive comments');
  assert.match(text, /data: \[DONE\]/);
  assert.equal((await srv.stop()).code, 0, srv.log);
});

test('a full queue answers 503 with Retry-After in each shape', async (t) => {
  const srv = await startServer(['--max-queue', '1']);
  t.after(() => srv.stop());
  const send = (i) => (i % 2
    ? post(srv, '/v1/messages', { model: 'default', messages, max_tokens: 40 }, { 'anthropic-version': '2023-06-01' })
    : post(srv, '/v1/chat/completions', { messages, max_tokens: 40 }));
  const all = await Promise.all(Array.from({ length: 14 }, (_, i) => send(i)));
  const busy = all.filter((r) => r.status === 503);
  assert.ok(busy.length >= 1, `some request saw the full queue: ${all.map((r) => r.status)}`);
  for (const r of all) assert.ok(r.status === 200 || r.status === 503, r.text);
  for (const r of busy) {
    assert.ok(r.headers.get('retry-after'));
    assert.ok(r.json.error && (r.json.type === 'error' ? r.json.error.type === 'overloaded_error' : r.json.error.type === 'server_error'), r.text);
  }
  assert.equal((await srv.stop()).code, 0, srv.log);
});

test('/health is 503 while loading, then 200; API routes 503 meanwhile', async (t) => {
  const srv = await startServer([], { RAPID_TEST_LOAD_DELAY_MS: '1500' }, { wait: false });
  t.after(() => srv.stop());
  const h = await fetch(`${srv.url}/health`);
  assert.equal(h.status, 503);
  assert.equal((await h.json()).status, 'loading');
  const c = await post(srv, '/v1/chat/completions', { messages, max_tokens: 2 });
  assert.equal(c.status, 503);
  assert.ok(c.headers.get('retry-after'));
  assert.equal((await waitHealthy(srv)).status, 'ok');
  assert.equal((await srv.stop()).code, 0, srv.log);
});

test('SIGTERM and SIGINT shut down gracefully with streams in flight', async (t) => {
  for (const sig of ['SIGTERM', 'SIGINT']) {
    const srv = await startServer();
    t.after(() => srv.stop());
    const res = await fetch(`${srv.url}/v1/messages`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'default', messages, max_tokens: 450, stream: true }),
    });
    const reader = res.body.getReader();
    await reader.read();
    const t0 = Date.now();
    const exit = await srv.stop(sig);
    assert.equal(exit.code, 0, srv.log);
    assert.ok(Date.now() - t0 < 5000, 'stopped promptly');
    assert.match(srv.log, /shutting down/);
    assert.match(srv.log, /stopped/);
    try { while (!(await reader.read()).done); } catch (e) { /* closed is fine */ }
  }
});
