// Runs every curl example of the README's "## Serving" section against a live server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { startServer } from './lib.mjs';

function examples() {
  const readme = fs.readFileSync(path.join(process.env.RP_SOURCE_DIR, 'README.md'), 'utf8');
  const section = readme.split(/^## /m).find((s) => s.startsWith('Serving'));
  assert.ok(section, 'README has a ## Serving section');
  const cmds = [];
  for (const block of section.matchAll(/```sh\n([\s\S]*?)```/g)) {
    const joined = block[1].replace(/\\\n\s*/g, '');
    for (const line of joined.split('\n')) if (line.startsWith('curl ')) cmds.push(line);
  }
  return cmds;
}

test('README curl examples', async () => {
  const cmds = examples();
  assert.ok(cmds.length >= 8, `found ${cmds.length} examples`);
  const srv = await startServer();
  try {
    for (const cmd of cmds) {
      const live = cmd.replaceAll('127.0.0.1:8000', `127.0.0.1:${srv.port}`);
      const out = execFileSync('bash', ['-c', `${live} -sS -w '\\n%{http_code}'`], { encoding: 'utf8' });
      const lines = out.trimEnd().split('\n');
      const status = Number(lines.pop());
      const body = lines.join('\n');
      assert.equal(status, 200, `${cmd}\n${body}`);
      if (body.startsWith('data: ') || body.startsWith('event: ')) {
        assert.match(body, /(data: \[DONE\]|event: message_stop)/, cmd);
      } else {
        const j = JSON.parse(body);
        assert.ok(!j.error, `${cmd}\n${body}`);
      }
    }
  } finally {
    assert.equal((await srv.stop()).code, 0, srv.log);
  }
});
