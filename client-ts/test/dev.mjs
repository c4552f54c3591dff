// Test helpers: a real `terret dev` on a free port against the test DynamoDB Local, dev
// tokens from its page, and a TCP proxy that can cut connections.
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Why the end-to-end tests cannot run here, or null. Under CI=true they fail instead of skipping. */
export function missing() {
  if (!process.env.TERRET_TEST_DYNAMODB_ENDPOINT) return 'TERRET_TEST_DYNAMODB_ENDPOINT is not set (scripts/test.sh sets it)';
  return null;
}

/** skipUnlessReady is a node:test option: skip when missing(), fail under CI. */
export function e2e() {
  const why = missing();
  if (why && process.env.CI === 'true') throw new Error(why);
  return why ? { skip: why } : {};
}

let built = null;
/** terretBin is TERRET_BIN, or a terret built once per test process. */
function terretBin() {
  if (process.env.TERRET_BIN) return process.env.TERRET_BIN;
  if (!built) {
    const dir = mkdtempSync(join(tmpdir(), 'terret-bin-'));
    built = join(dir, 'terret');
    execFileSync('go', ['build', '-o', built, './cmd/terret'], { cwd: repo, stdio: 'inherit' });
  }
  return built;
}

export const id = (prefix) => `${prefix}-${randomBytes(5).toString('hex')}`;

/** until polls check (a condition the code reaches, not a delay) until it is truthy. */
export async function until(what, check, timeoutMs = 120000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * startDev runs `terret dev` with extra flags and resolves once its ready file is
 * written. It returns { wsBase, httpBase, token(agent), stop() }.
 */
export async function startDev(flags = []) {
  const dir = mkdtempSync(join(tmpdir(), 'terret-dev-'));
  const ready = join(dir, 'ready.json');
  const proc = spawn(terretBin(), ['dev', '--addr', '127.0.0.1:0', '--dynamodb-endpoint', process.env.TERRET_TEST_DYNAMODB_ENDPOINT,
    '--table-prefix', id('tsc') + '-', '--ready-file', ready, ...flags], {
    env: { ...process.env, TERRET_STATE_DIR: dir }, stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  proc.stderr.on('data', (d) => (stderr += d));
  let exited = null;
  const reap = () => proc.kill('SIGTERM'); // a test process that dies early takes its terret dev along
  process.on('exit', reap);
  proc.on('exit', (code) => {
    exited = code;
    process.off('exit', reap);
  });
  await until('terret dev to be ready', () => {
    if (exited !== null) throw new Error(`terret dev exited ${exited}:\n${stderr}`);
    return existsSync(ready) && readFileSync(ready, 'utf8').trim().endsWith('}');
  }, 60000);
  const info = JSON.parse(readFileSync(ready, 'utf8'));
  const host = new URL(info.ws_url.replace('{agent_id}', 'x')).host;
  // The page key /dev/token asks for: terret dev writes the page's address with it
  // (#key=…) into the ready file, readable by this user only.
  const pageKey = new URL(info.page_url ?? '').hash.replace(/^#key=/, '');
  if (!pageKey) throw new Error(`terret dev's ready file has no page_url with a key: ${JSON.stringify(Object.keys(info))}`);
  return {
    host,
    url: (agent, h = host) => `ws://${h}/agents/${agent}/ws`,
    async token(agent) {
      const r = await fetch(`http://${host}/dev/token?agent=${agent}`, { headers: { 'X-Terret-Dev': pageKey } });
      if (!r.ok) throw new Error(`dev token: ${r.status} ${await r.text()}`);
      return (await r.json()).token;
    },
    logs: () => stderr,
    /** terret runs a terret command (e.g. session reset) against this terret dev and returns its stdout. */
    terret: (args) => execFileSync(terretBin(), [...args, '--addr', host], { env: { ...process.env, TERRET_STATE_DIR: dir }, encoding: 'utf8' }),
    async stop() {
      if (exited === null) {
        const gone = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        await gone;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * startProxy forwards TCP connections to target (host:port). cutAll() destroys every
 * open connection (both sides at once, as a network failure does); cutAfter(n) makes the
 * next connection die once n bytes went from the server to the client.
 */
export async function startProxy(target) {
  const [thost, tport] = target.split(':');
  const pairs = new Set();
  let budget = null;
  let connections = 0;
  const server = createServer((down) => {
    connections++;
    const up = createConnection({ host: thost, port: Number(tport) });
    const pair = { up, down };
    pairs.add(pair);
    let left = budget;
    budget = null;
    const end = () => {
      pairs.delete(pair);
      up.destroy();
      down.destroy();
    };
    up.on('data', (d) => {
      if (left !== null) {
        if (d.length >= left) {
          // Flush what passed, then hang up without a close frame (destroy would drop
          // the unflushed bytes too).
          pairs.delete(pair);
          up.destroy();
          down.end(d.subarray(0, left));
          left = 0;
          return;
        }
        left -= d.length;
      }
      down.write(d);
    });
    down.on('data', (d) => {
      if (!up.destroyed) up.write(d);
    });
    up.on('error', end).on('close', end);
    down.on('error', end).on('close', end);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    host: `127.0.0.1:${server.address().port}`,
    get connections() { return connections; },
    cutAll() {
      for (const p of [...pairs]) {
        p.up.destroy();
        p.down.destroy();
      }
      pairs.clear();
    },
    cutAfter(bytes) {
      budget = bytes;
    },
    close() {
      for (const p of pairs) {
        p.up.destroy();
        p.down.destroy();
      }
      return new Promise((r) => server.close(r));
    },
  };
}
