// GET /metrics and GET /v1/status on the embedded default model (models/default): the
// exposition text is well-formed, counters move by exactly what the requests' usage says
// (streaming and not, OpenAI and Anthropic, an error), histogram counts match the requests,
// /v1/status shows a live stream in decode phase and nothing once it ended; auth, methods
// and the loading state follow the other /v1 routes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, openai, anthropic, post, waitHealthy } from './lib.mjs';

const model = path.join(process.env.RP_SOURCE_DIR, 'models/default');
if (!fs.existsSync(path.join(model, 'config.json'))) throw new Error(`missing the default model: ${model}`);

// `rapid serve models/default --port 0 ...` through lib.mjs's startServer.
const startDefault = (args = [], env = {}, { wait = true } = {}) =>
  startServer(args, env, { wait, model });

// Parses Prometheus text (format 0.0.4), checking every line against the grammar; returns
// series ("name{labels}" as written) -> value, and the TYPE of each family.
function parseMetrics(text) {
  assert.ok(text.endsWith('\n'), 'exposition text ends with a newline');
  const name = '[a-zA-Z_:][a-zA-Z0-9_:]*';
  const label = '[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\\\\n]|\\\\[\\\\"n])*"';
  const value = '(?:[+-]?(?:\\d+\\.?\\d*|\\.\\d+)(?:[eE][+-]?\\d+)?|NaN|[+-]?Inf)';
  const sample = new RegExp(`^(${name})(\\{(?:${label}(?:,${label})*,?)?\\})? (${value})(?: -?\\d+)?$`);
  const help = new RegExp(`^# HELP (${name}) (?:[^\\\\]|\\\\[\\\\n])*$`);
  const type = new RegExp(`^# TYPE (${name}) (counter|gauge|histogram|summary|untyped)$`);
  const series = new Map(), types = new Map(), done = new Set();
  let current = null;
  const familyOf = (n) => {
    for (const s of ['_bucket', '_sum', '_count']) {
      const base = n.slice(0, -s.length);
      if (n.endsWith(s) && types.get(base) === 'histogram') return base;
    }
    return n;
  };
  const enter = (fam, line) => {
    if (fam === current) return;
    assert.ok(!done.has(fam), `family ${fam} is not contiguous: ${line}`);
    if (current) done.add(current);
    current = fam;
  };
  for (const line of text.slice(0, -1).split('\n')) {
    if (line === '') continue;
    let m;
    if ((m = type.exec(line))) {
      assert.ok(!types.has(m[1]), `second TYPE: ${line}`);
      enter(m[1], line);
      types.set(m[1], m[2]);
    } else if ((m = help.exec(line))) {
      enter(m[1], line);
    } else if (line.startsWith('#')) {
      assert.ok(!line.startsWith('# HELP') && !line.startsWith('# TYPE'), `bad comment: ${line}`);
    } else {
      m = sample.exec(line);
      assert.ok(m, `not a valid sample line: ${JSON.stringify(line)}`);
      enter(familyOf(m[1]), line);
      const key = m[1] + (m[2] ?? '');
      assert.ok(!series.has(key), `duplicate series ${key}`);
      series.set(key, Number(m[3].replace(/Inf$/, 'Infinity')));
    }
  }
  // histograms: cumulative buckets ending in +Inf, which equals _count
  for (const [fam, t] of types) {
    if (t !== 'histogram') continue;
    const buckets = [...series].filter(([k]) => k.startsWith(`${fam}_bucket{`));
    assert.ok(buckets.length > 1, `${fam} has buckets`);
    let prevLe = -Infinity, prev = 0;
    for (const [k, v] of buckets) {
      const le = Number(/le="([^"]+)"/.exec(k)[1].replace(/Inf$/, 'Infinity'));
      assert.ok(le > prevLe && v >= prev, `${fam} buckets ordered and cumulative at ${k}`);
      prevLe = le; prev = v;
    }
    assert.equal(prevLe, Infinity, `${fam} ends with +Inf`);
    assert.equal(series.get(`${fam}_count`), prev, `${fam}_count equals the +Inf bucket`);
    assert.ok(series.has(`${fam}_sum`), `${fam}_sum`);
  }
  return { series, types };
}

async function scrape(srv, headers = {}) {
  const r = await fetch(`${srv.url}/metrics`, { headers });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8');
  return parseMetrics(await r.text()).series;
}

const get = (s, k) => s.get(k) ?? 0;
const http = (ep, st) => `rapid_http_requests_total{endpoint="${ep}",status="${st}"}`;
const gens = (s, ep) => [...s].filter(([k]) => k.startsWith(`rapid_generations_total{endpoint="${ep}",`))
  .reduce((a, [, v]) => a + v, 0);

const messages = [{ role: 'user', content: 'Tell me about the sea.' }];

test('counters and histograms move by exactly what the requests did', async (t) => {
  const srv = await startDefault();
  t.after(() => srv.stop());
  const oc = openai(srv), ac = anthropic(srv);
  const before = await scrape(srv);
  const usages = []; // [prompt, completion]

  const c1 = await oc.chat.completions.create({ model: 'default', messages, max_tokens: 8, seed: 1 });
  usages.push([c1.usage.prompt_tokens, c1.usage.completion_tokens]);
  const s1 = await oc.chat.completions.create({ model: 'default', messages, max_tokens: 8, seed: 2, stream: true,
    stream_options: { include_usage: true } });
  let u = null;
  for await (const c of s1) if (c.usage) u = c.usage;
  usages.push([u.prompt_tokens, u.completion_tokens]);
  const p1 = await oc.completions.create({ model: 'default', prompt: 'It was a cold morning', max_tokens: 6, seed: 3 });
  usages.push([p1.usage.prompt_tokens, p1.usage.completion_tokens]);
  const a1 = await ac.messages.create({ model: 'default', messages, max_tokens: 7, seed: 4 });
  usages.push([a1.usage.input_tokens, a1.usage.output_tokens]);
  const a2 = await ac.messages.stream({ model: 'default', messages, max_tokens: 9, seed: 5 }).finalMessage();
  usages.push([a2.usage.input_tokens, a2.usage.output_tokens]);
  const bad = await post(srv, '/v1/chat/completions', { messages: 'not a list' });
  assert.equal(bad.status, 400);
  const missing = await post(srv, '/v1/chat/completions', { model: 'nope', messages });
  assert.equal(missing.status, 404);

  const after = await scrape(srv);
  const d = (k) => get(after, k) - get(before, k);
  const sum = (f) => usages.reduce((a, x) => a + f(x), 0);
  const prompt = sum(([p]) => p), completion = sum(([, c]) => c);
  const withTokens = sum(([, c]) => (c > 0 ? 1 : 0)), gaps = sum(([, c]) => Math.max(c - 1, 0));
  console.log(`usage: ${prompt} prompt, ${completion} completion tokens over ${usages.length} generations`);

  assert.equal(d(http('/v1/chat/completions', 200)), 2);
  assert.equal(d(http('/v1/completions', 200)), 1);
  assert.equal(d(http('/v1/messages', 200)), 2);
  assert.equal(d(http('/v1/chat/completions', 400)), 1);
  assert.equal(d(http('/v1/chat/completions', 404)), 1);
  assert.equal(d(http('/metrics', 200)), 1, 'the first scrape (a scrape counts before it is sent)');
  assert.equal(d('rapid_prompt_tokens_total'), prompt);
  assert.equal(d('rapid_generation_tokens_total'), completion);
  assert.equal(d('rapid_time_to_first_token_seconds_count'), withTokens);
  assert.equal(d('rapid_inter_token_latency_seconds_count'), gaps);
  assert.equal(d('rapid_request_duration_seconds_count'), usages.length);
  assert.ok(d('rapid_time_to_first_token_seconds_sum') > 0);
  assert.ok(d('rapid_request_duration_seconds_sum') >= d('rapid_time_to_first_token_seconds_sum'));
  assert.equal(gens(after, '/v1/chat/completions') - gens(before, '/v1/chat/completions'), 2);
  assert.equal(gens(after, '/v1/completions') - gens(before, '/v1/completions'), 1);
  assert.equal(gens(after, '/v1/messages') - gens(before, '/v1/messages'), 2);
  assert.equal(d('rapid_engine_requests_total'), usages.length);
  assert.equal(d('rapid_engine_prompt_tokens_total'), prompt);
  assert.equal(d('rapid_prefix_cache_hit_tokens_total') + d('rapid_prefix_cache_miss_tokens_total'), prompt);
  const rate = get(after, 'rapid_prefix_cache_hit_rate');
  assert.ok(rate >= 0 && rate <= 1);
  assert.equal(get(after, 'rapid_requests_in_flight'), 0);
  assert.equal(get(after, 'rapid_num_requests_running'), 0);
  // the paged KV pool: nothing held once every request is done, its cached blocks indexed
  assert.ok(get(after, 'rapid_kv_blocks_total') > 0);
  assert.equal(get(after, 'rapid_kv_blocks_used'), 0);
  assert.equal(get(after, 'rapid_kv_blocks_free'), get(after, 'rapid_kv_blocks_total'));
  assert.ok(get(after, 'rapid_kv_blocks_cached') <= get(after, 'rapid_kv_blocks_total'));
  assert.ok(get(after, 'rapid_kv_bytes_per_token') > 0);
  assert.equal(get(after, 'rapid_num_requests_waiting'), 0);
  assert.equal(get(after, 'rapid_model_loaded'), 1);
  assert.equal((await srv.stop()).code, 0, srv.log);
});

test('/v1/status shows a live stream in decode phase, and nothing once it ended', async (t) => {
  const srv = await startDefault();
  t.after(() => srv.stop());
  const idle = await (await fetch(`${srv.url}/v1/status`)).json();
  assert.equal(idle.model, 'default');
  assert.deepEqual(idle.requests, []);
  assert.equal(idle.queue_depth, 0);

  const res = await fetch(`${srv.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 200, temperature: 0, stream: true }),
  });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  let got = '';
  while ((got.match(/data: /g) || []).length < 5) got += new TextDecoder().decode((await reader.read()).value);
  const st = await (await fetch(`${srv.url}/v1/status`)).json();
  assert.equal(st.requests.length, 1, JSON.stringify(st));
  const r = st.requests[0];
  assert.equal(r.phase, 'decode');
  assert.equal(r.endpoint, '/v1/completions');
  assert.equal(r.stream, true);
  assert.ok(Number.isInteger(r.id));
  assert.ok(r.prompt_tokens > 0 && r.completion_tokens >= 5, JSON.stringify(r));
  assert.ok(r.tokens_per_second > 0 && r.ttft_s > 0 && r.age_s >= r.ttft_s, JSON.stringify(r));
  assert.equal(st.running, 1);
  const live = await scrape(srv);
  assert.equal(get(live, 'rapid_requests_in_flight'), 1);
  assert.equal(get(live, 'rapid_num_requests_running'), 1);
  console.log(`live: ${JSON.stringify(r)}`);

  while (!(await reader.read()).done);
  const end = await (await fetch(`${srv.url}/v1/status`)).json();
  assert.deepEqual(end.requests, [], JSON.stringify(end));
  const after = await scrape(srv);
  assert.equal(get(after, 'rapid_requests_in_flight'), 0);
  assert.equal(get(after, 'rapid_request_duration_seconds_count'), 1);
  assert.equal(get(after, 'rapid_generation_tokens_total'), 200, 'greedy runs to max_tokens');
  assert.equal(get(after, 'rapid_inter_token_latency_seconds_count'), 199);
  assert.equal((await srv.stop()).code, 0, srv.log);
});

test('a request waiting for a sequence slot shows as queued', async (t) => {
  const srv = await startDefault();
  t.after(() => srv.stop());
  const body = (n) => JSON.stringify({ prompt: 'Once upon a time', max_tokens: n, temperature: 0, stream: true });
  const open = async (n) => {
    const r = await fetch(`${srv.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(n) });
    assert.equal(r.status, 200); // headers come once the generation is submitted
    return r;
  };
  // more streams than the engine has slots (at most 8; fewer when the model's batch is
  // smaller), then one more: once every slot decodes, the rest wait, newest last
  const busy = await Promise.all(Array.from({ length: 8 }, () => open(150)));
  const waiting = await open(3);
  let st;
  for (const end = Date.now() + 10000; ;) {
    st = await (await fetch(`${srv.url}/v1/status`)).json();
    if (st.running + st.queue_depth === 9 && !st.requests.some((r) => r.phase === 'prefill')) break;
    assert.ok(Date.now() < end, `status did not settle: ${JSON.stringify(st)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  console.log(`${st.running} running, ${st.queue_depth} queued`);
  assert.equal(st.requests.length, 9, JSON.stringify(st));
  assert.ok(st.queue_depth >= 1, 'the last one waits');
  const last = st.requests.reduce((a, r) => (r.id > a.id ? r : a));
  assert.equal(last.phase, 'queued', JSON.stringify(st));
  assert.equal(last.completion_tokens, 0);
  assert.equal(st.requests.filter((r) => r.phase === 'queued').length, st.queue_depth);
  assert.equal(st.requests.filter((r) => r.phase === 'decode').length, st.running);
  const m = await scrape(srv);
  assert.equal(get(m, 'rapid_requests_in_flight'), 9);
  for (const r of [...busy, waiting]) await r.text();
  assert.deepEqual((await (await fetch(`${srv.url}/v1/status`)).json()).requests, []);
  assert.equal((await srv.stop()).code, 0, srv.log);
});

test('auth like the other /v1 routes, GET only, and the loading state', async (t) => {
  const srv = await startDefault(['--api-key', 'sekrit'], { RAPID_TEST_LOAD_DELAY_MS: '1500' }, { wait: false });
  t.after(() => srv.stop());
  // while loading: /metrics answers with the server's own metrics, /v1/status 503
  const loading = await fetch(`${srv.url}/metrics`, { headers: { authorization: 'Bearer sekrit' } });
  assert.equal(loading.status, 200);
  const ls = parseMetrics(await loading.text()).series;
  assert.equal(ls.get('rapid_model_loaded'), 0);
  assert.ok(!ls.has('rapid_num_requests_running'), 'no engine rows before the engine exists');
  const st = await fetch(`${srv.url}/v1/status`, { headers: { 'x-api-key': 'sekrit' } });
  assert.equal(st.status, 503);
  assert.ok(st.headers.get('retry-after'));
  await waitHealthy(srv);

  for (const route of ['/metrics', '/v1/status']) {
    const no = await fetch(`${srv.url}${route}`);
    assert.equal(no.status, 401, `${route} without the key`);
    const wrong = await fetch(`${srv.url}${route}`, { headers: { authorization: 'Bearer nope' } });
    assert.equal(wrong.status, 401);
    const ok = await fetch(`${srv.url}${route}`, { headers: { authorization: 'Bearer sekrit' } });
    assert.equal(ok.status, 200);
    const ok2 = await fetch(`${srv.url}${route}`, { headers: { 'x-api-key': 'sekrit' } });
    assert.equal(ok2.status, 200);
    for (const method of ['HEAD', 'POST', 'PUT', 'DELETE']) {
      const r = await fetch(`${srv.url}${route}`, { method, headers: { 'x-api-key': 'sekrit' } });
      assert.equal(r.status, 405, `${method} ${route}`);
      assert.equal(r.headers.get('allow'), 'GET, OPTIONS');
    }
  }
  assert.equal((await fetch(`${srv.url}/health`)).status, 200, '/health stays open');
  const s = await scrape(srv, { authorization: 'Bearer sekrit' });
  assert.equal(get(s, http('/metrics', 401)), 2);
  assert.equal(get(s, http('/v1/status', 401)), 2);
  assert.equal(get(s, http('/metrics', 405)), 4);
  assert.equal(get(s, http('/v1/status', 503)), 1);
  assert.equal(get(s, http('/metrics', 200)), 3);
  assert.ok(get(s, http('/health', 200)) >= 1);
  assert.equal((await srv.stop()).code, 0, srv.log);
});
