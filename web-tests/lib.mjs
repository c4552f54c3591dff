// Helpers the browser tests of the terret dev page share: polling, a TCP proxy that
// can cut the page's socket, the browser, and the page's controls.
import { createConnection, createServer } from 'node:net';
import { chromium } from 'playwright-core';

export const WAIT_MS = 60000; // per step: a shared, loaded DynamoDB Local makes a turn take seconds

// Polls check until it returns a truthy value; fails with what and the last value seen.
export async function until(what, check, timeout = WAIT_MS) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await check();
      if (last) return last;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// A TCP proxy to the gateway; cut() drops every connection through it at once.
export async function proxyTo(target) {
  const pairs = new Set();
  const server = createServer((down) => {
    const up = createConnection({ host: target.hostname, port: Number(target.port) });
    const pair = [up, down];
    pairs.add(pair);
    const end = () => {
      pairs.delete(pair);
      up.destroy();
      down.destroy();
    };
    up.pipe(down);
    down.pipe(up);
    up.on('error', end).on('close', end);
    down.on('error', end).on('close', end);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `ws://127.0.0.1:${server.address().port}`,
    cut() {
      const n = pairs.size;
      for (const [up, down] of [...pairs]) {
        up.destroy();
        down.destroy();
      }
      return n;
    },
    close: () => new Promise((r) => server.close(r)),
  };
}

// launch starts Debian's Chromium headless (CHROMIUM overrides the path).
export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    chromiumSandbox: false,
    args: ['--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
}

// watch records a page's uncaught errors in problems and prints its console errors.
export function watch(page, name, problems) {
  page.on('pageerror', (err) => problems.push(`${name}: ${err.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') console.error(`[${name} console] ${m.text()}`);
  });
}

// Everything a page shows that the tests read.
export const status = (page) => page.locator('#status').textContent();
export const state = (page) => page.locator('#status').getAttribute('data-state');
export const logSeqs = (page) => page.locator('#log li.event .seq').allTextContents().then((s) => s.map(Number));
export const logTypes = (page) => page.locator('#log li.event .type').allTextContents();
export const lastReply = (page) => page.locator('#chat li.assistant[data-final="true"] .text').last().textContent();
export const turnEnds = (page) => page.locator('#chat li.turn.end').evaluateAll((ls) => ls.map((l) => l.dataset.status));

// connect fills the form, takes a dev token and connects; it returns once hello came.
export async function connect(page, server, agent, fromSeq) {
  await page.getByLabel('Server', { exact: true }).fill(server);
  await page.getByLabel('Agent id', { exact: true }).fill(agent);
  if (fromSeq !== undefined) await page.getByLabel('Subscribe from seq', { exact: true }).fill(String(fromSeq));
  await page.getByRole('button', { name: 'Dev token', exact: true }).click();
  await until('a dev token in the token field', async () => /^tt_/.test(await page.getByLabel('Token', { exact: true }).inputValue()));
  await page.getByRole('button', { name: 'Connect', exact: true }).click();
  await until('hello', async () => (await status(page)).startsWith(`Connected to session ${agent} `));
}

export async function say(page, text) {
  await page.getByLabel('Message', { exact: true }).fill(text);
  await page.getByRole('button', { name: 'Send', exact: true }).click();
}
