// Driver of scripts/soak-server.sh: mixed concurrent load with disconnects, RSS sampling.
import fs from 'node:fs';
import { startServer, openai, anthropic, post } from '../tests/integration/lib.mjs';

const seconds = Number(process.argv[2] || 600), workers = Number(process.argv[3] || 8);
const srv = await startServer(['--log-level', 'warn']);
const oc = openai(srv), ac = anthropic(srv);
const messages = [{ role: 'user', content: 'Tell me something.' }];
const counts = {}, bad = [];
const rss = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${srv.proc.pid}/status`, 'utf8'))[1]);
const rand = (n) => Math.floor(Math.random() * n);

const kinds = {
  async chat() { const r = await oc.chat.completions.create({ model: 'default', messages, max_tokens: 1 + rand(32) }); if (!r.choices[0].finish_reason) throw new Error('no finish'); },
  async chatStream() {
    const s = await oc.chat.completions.create({ model: 'default', messages, max_tokens: 1 + rand(32), stream: true, stream_options: { include_usage: true } });
    let usage = null; for await (const c of s) usage = c.usage ?? usage; if (!usage) throw new Error('no usage');
  },
  async completion() { await oc.completions.create({ model: 'default', prompt: 'Once', max_tokens: 1 + rand(16), stop: ['e'] }); },
  async messages() { await ac.messages.create({ model: 'default', messages, max_tokens: 1 + rand(32) }); },
  async messagesStream() { await ac.messages.stream({ model: 'default', messages, max_tokens: 1 + rand(32), stop_sequences: ['a'] }).finalMessage(); },
  async countTokens() { await ac.messages.countTokens({ model: 'default', messages }); },
  async badRequest() { const r = await post(srv, '/v1/chat/completions', '{"messages": [', {}); if (r.status !== 400) throw new Error(`status ${r.status}`); },
  async disconnect() {
    const ctrl = new AbortController();
    const res = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', signal: ctrl.signal,
      headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages, max_tokens: 200, stream: true }) });
    const reader = res.body.getReader();
    for (let i = 0, n = 1 + rand(5); i < n; i++) await reader.read();
    ctrl.abort();
  },
};
const names = Object.keys(kinds);

const end = Date.now() + seconds * 1000;
const samples = [];
const sampler = setInterval(() => { samples.push(rss()); if (process.env.SOAK_TRACE) console.error("rss", samples.at(-1)); }, 5000);
await Promise.all(Array.from({ length: workers }, async () => {
  while (Date.now() < end) {
    const k = names[rand(names.length)];
    if (process.env.SOAK_TRACE) console.error("start", k);
    try { await kinds[k](); counts[k] = (counts[k] || 0) + 1; } catch (e) {
      if (k === 'disconnect' && e.name === 'AbortError') { counts[k] = (counts[k] || 0) + 1; continue; }
      bad.push(`${k}: ${e.message}`);
    }
  }
}));
clearInterval(sampler);
samples.push(rss());
const exit = await srv.stop();
const total = Object.values(counts).reduce((a, b) => a + b, 0);
const warm = samples[Math.min(samples.length - 1, Math.floor(samples.length / 5))];
const last = samples[samples.length - 1], max = Math.max(...samples);
const flat = last <= warm * 1.2 + 8192;
console.log(JSON.stringify({ seconds, workers, requests: total, per_second: +(total / seconds).toFixed(1), counts,
  unexpected: bad.length, first_errors: bad.slice(0, 5), rss_kb: { warm, last, max, samples: samples.length },
  memory_flat: flat, exit_code: exit.code }, null, 1));
if (exit.code !== 0) console.log(srv.log.split('\n').filter((l) => /ERROR|Sanitizer|leak/.test(l)).slice(0, 40).join('\n'));
process.exit(bad.length === 0 && exit.code === 0 && flat ? 0 : 1);
