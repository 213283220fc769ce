// Anthropic Messages API through the official @anthropic-ai/sdk: messages, streaming event
// sequence, count_tokens, stop_sequences, blocks, models.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, anthropic, post } from './lib.mjs';

let srv, client;
before(async () => { srv = await startServer(['--served-model-name', 'tiny']); client = anthropic(srv); });
after(async () => { const e = await srv.stop(); assert.equal(e.code, 0, srv.log); });

const messages = [{ role: 'user', content: 'Say hello.' }];

test('messages, not streamed', async () => {
  const r = await client.messages.create({ model: 'tiny', max_tokens: 10, system: 'be brief', messages, temperature: 0 });
  assert.equal(r.type, 'message');
  assert.match(r.id, /^msg_/);
  assert.equal(r.role, 'assistant');
  assert.equal(r.content[0].type, 'text');
  assert.ok(['end_turn', 'max_tokens'].includes(r.stop_reason));
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
});

test('messages, streamed: the full event sequence', async () => {
  const res = await fetch(`${srv.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'tiny', max_tokens: 8, messages, stream: true, temperature: 0 }),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /text\/event-stream/);
  const events = [];
  for (const block of (await res.text()).split('\n\n')) {
    const m = /^event: (\S+)\ndata: (.*)$/s.exec(block.trim());
    if (m) { events.push(m[1]); assert.equal(JSON.parse(m[2]).type, m[1]); }
  }
  const order = events.filter((e, i) => e !== 'content_block_delta' || events[i - 1] !== 'content_block_delta');
  assert.deepEqual(order, ['message_start', 'content_block_start', 'ping', 'content_block_delta',
    'content_block_stop', 'message_delta', 'message_stop']);

  const stream = client.messages.stream({ model: 'tiny', max_tokens: 8, messages, temperature: 0 });
  let text = '';
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.equal(final.content[0].text, text);
  assert.ok(final.usage.output_tokens > 0);
  const plain = await client.messages.create({ model: 'tiny', max_tokens: 8, messages, temperature: 0 });
  assert.equal(plain.content[0].text, text);
});

test('count_tokens', async () => {
  const r = await client.messages.countTokens({ model: 'tiny', messages });
  assert.ok(r.input_tokens > 0);
  const m = await client.messages.create({ model: 'tiny', max_tokens: 1, messages });
  assert.equal(r.input_tokens, m.usage.input_tokens);
});

test('stop_sequences', async () => {
  const base = { model: 'tiny', max_tokens: 24, messages, temperature: 0 };
  const full = (await client.messages.create(base)).content[0].text;
  assert.ok(full.length >= 6, full);
  const stop = [...full].slice(3, 5).join('');
  const r = await client.messages.create({ ...base, stop_sequences: [stop] });
  assert.equal(r.content[0].text, full.slice(0, full.indexOf(stop)));
  assert.equal(r.stop_reason, 'stop_sequence');
  assert.equal(r.stop_sequence, stop);
  const s = client.messages.stream({ ...base, stop_sequences: [stop] });
  const fin = await s.finalMessage();
  assert.equal(fin.content[0].text, r.content[0].text);
  assert.equal(fin.stop_reason, 'stop_sequence');
});

test('blocks: system list, tool_use, tool_result, thinking, tools, tool_choice, metadata', async () => {
  const r = await client.messages.create({
    model: 'tiny', max_tokens: 4, metadata: { user_id: 'u1' },
    system: [{ type: 'text', text: 'You are terse.' }],
    tools: [{ name: 'get_weather', description: 'weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }],
    tool_choice: { type: 'auto' },
    messages: [
      { role: 'user', content: [{ type: 'text', text: 'Weather in Paris?' }] },
      { role: 'assistant', content: [
        { type: 'thinking', thinking: 'use the tool', signature: 'sig' },
        { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '21C' }] },
    ],
  });
  assert.equal(r.type, 'message');
  const tools = [{ name: 'get_weather', input_schema: { type: 'object' } }];
  for (const choice of [{ type: 'auto' }, { type: 'none' }]) {
    const x = await client.messages.create({ model: 'tiny', max_tokens: 2, messages, tools, tool_choice: choice });
    assert.equal(x.type, 'message');
  }
  // any / tool must yield a call (docs/tool-calling.md): 2 tokens of a random model cannot
  for (const choice of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }])
    await assert.rejects(client.messages.create({ model: 'tiny', max_tokens: 2, messages, tools, tool_choice: choice }),
      (e) => e.status === 500 && /tool_choice .*max_tokens/.test(e.message));
});

test('images are refused with a clear error', async () => {
  await assert.rejects(client.messages.create({
    model: 'tiny', max_tokens: 4,
    messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }],
  }), (e) => e.status === 400 && /image/.test(e.message) && e.error?.type === 'error');
});

test('max_tokens is required', async () => {
  const r = await post(srv, '/v1/messages', { model: 'tiny', messages }, { 'anthropic-version': '2023-06-01' });
  assert.equal(r.status, 400);
  assert.equal(r.json.type, 'error');
  assert.equal(r.json.error.type, 'invalid_request_error');
  assert.match(r.json.error.message, /max_tokens/);
});

test('models in the Anthropic shape', async () => {
  const list = await client.models.list();
  const ids = [];
  for await (const m of list) ids.push(m.id);
  assert.ok(ids.includes('tiny'));
  const m = await client.models.retrieve('tiny');
  assert.equal(m.type, 'model');
});
