// OpenAI API through the official openai@6 SDK: chat (plain, streaming, usage, seed, stop,
// logprobs, tools rendered), completions, models.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, openai, post } from './lib.mjs';

let srv, client;
before(async () => { srv = await startServer(['--served-model-name', 'tiny']); client = openai(srv); });
after(async () => { const e = await srv.stop(); assert.equal(e.code, 0, srv.log); });

const msgs = [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'Say hello.' }];

test('chat, not streamed', async () => {
  const r = await client.chat.completions.create({ model: 'tiny', messages: msgs, max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.model, 'tiny');
  assert.ok(r.system_fingerprint);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('chat, streamed with usage', async () => {
  const stream = await client.chat.completions.create({
    model: 'default', messages: msgs, max_tokens: 10, stream: true, stream_options: { include_usage: true }, seed: 3,
  });
  let text = '', finish = null, usage = null, first = true, n = 0;
  for await (const chunk of stream) {
    n++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    if (!chunk.choices.length) continue;
    if (first) { assert.equal(chunk.choices[0].delta.role, 'assistant'); first = false; }
    text += chunk.choices[0].delta.content ?? '';
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.ok(n >= 3);
  assert.ok(['stop', 'length'].includes(finish));
  assert.ok(usage && usage.completion_tokens > 0 && usage.completion_tokens <= 10, JSON.stringify(usage));
  const plain = await client.chat.completions.create({ model: 'tiny', messages: msgs, max_tokens: 10, seed: 3 });
  assert.equal(text, plain.choices[0].message.content, 'stream and plain agree for one seed');
});

test('seed reproducibility', async () => {
  const a = await client.chat.completions.create({ messages: msgs, model: 'tiny', max_tokens: 16, seed: 42, temperature: 1 });
  const b = await client.chat.completions.create({ messages: msgs, model: 'tiny', max_tokens: 16, seed: 42, temperature: 1 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

async function stopCase(make, get) {
  const full = get(await make({}));
  assert.ok(full.length >= 6, `need some text to cut: ${JSON.stringify(full)}`);
  const stop = [...full].slice(3, 5).join('');
  const expected = full.slice(0, full.indexOf(stop));
  const cut = await make({ stop: [stop] });
  return { stop, expected, cut };
}

test('stop sequences are never leaked (chat and completions, streamed and not)', async () => {
  const base = { model: 'tiny', messages: msgs, max_tokens: 24, seed: 7 };
  let { stop, expected, cut } = await stopCase(
    (o) => client.chat.completions.create({ ...base, ...o }), (r) => r.choices[0].message.content);
  assert.equal(cut.choices[0].message.content, expected);
  assert.ok(!cut.choices[0].message.content.includes(stop));
  assert.equal(cut.choices[0].finish_reason, 'stop');

  const stream = await client.chat.completions.create({ ...base, stop, stream: true });
  let text = '';
  for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
  assert.equal(text, expected);

  const cbase = { model: 'tiny', prompt: 'Once upon a time', max_tokens: 24, seed: 9 };
  ({ stop, expected, cut } = await stopCase(
    (o) => client.completions.create({ ...cbase, ...o }), (r) => r.choices[0].text));
  assert.equal(cut.choices[0].text, expected);
});

test('completions: string prompt, token ids, streamed', async () => {
  const r = await client.completions.create({ model: 'tiny', prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(r.usage.completion_tokens > 0);
  const ids = await client.completions.create({ model: 'tiny', prompt: [72, 105, 33], max_tokens: 4 });
  assert.equal(ids.usage.prompt_tokens, 3);
  const stream = await client.completions.create({ model: 'tiny', prompt: 'Hi', max_tokens: 6, stream: true });
  let finish = null;
  for await (const c of stream) { assert.equal(c.object, 'text_completion'); finish = c.choices[0]?.finish_reason ?? finish; }
  assert.ok(['stop', 'length'].includes(finish));
});

test('models: list, get, alias, default', async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  assert.ok(ids.includes('tiny'));
  assert.equal((await client.models.retrieve('tiny')).id, 'tiny');
  assert.equal((await client.models.retrieve('default')).id, 'tiny');
  assert.equal((await client.models.retrieve('tiny-llama-v1')).id, 'tiny', 'the folder name is an alias');
  await assert.rejects(client.models.retrieve('nope'), (e) => e.status === 404);
});

test('every documented parameter is accepted', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny',
    messages: [
      { role: 'developer', content: 'dev' },
      { role: 'user', content: [{ type: 'text', text: 'part one' }, { type: 'text', text: 'part two' }] },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp":21}' },
    ],
    max_completion_tokens: 6, temperature: 0.7, top_p: 0.9, top_k: 20, min_p: 0.05,
    presence_penalty: 0.1, frequency_penalty: 0.1, repetition_penalty: 1.05, seed: 1, n: 1,
    logprobs: true, top_logprobs: 2, user: 'tester', response_format: { type: 'json_object' },
    tools: [{ type: 'function', function: { name: 'get_weather', description: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
    tool_choice: 'auto', parallel_tool_calls: true,
  });
  assert.ok(r.choices[0].logprobs && Array.isArray(r.choices[0].logprobs.content));
  assert.equal(r.choices[0].logprobs.content.length, r.usage.completion_tokens);
  const lp = r.choices[0].logprobs.content[0];
  assert.equal(typeof lp.token, 'string');
  assert.equal(typeof lp.logprob, 'number');
  assert.ok(Array.isArray(lp.top_logprobs));
});

test('tools change the prompt (rendered by the template)', async () => {
  const plain = await post(srv, '/v1/chat/completions', { messages: msgs, max_tokens: 1 });
  const tools = await post(srv, '/v1/chat/completions', {
    messages: msgs, max_tokens: 1,
    tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }],
  });
  assert.equal(plain.status, 200);
  assert.ok(tools.json.usage.prompt_tokens > plain.json.usage.prompt_tokens);
});
