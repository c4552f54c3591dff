// Browser test of the page's read-only view: opened from a share link with an observer
// token (#agent=ID&observe=TOKEN), it follows a turn that another client drives with
// the driver's token. internal/webui's Go test (TestBrowserObserver) holds the driver
// (a Go client) and runs:
//
//   node web-tests/observer.test.mjs http://127.0.0.1:PORT/
//
// Environment: AGENT_ID, OBSERVER_TOKEN (an observer token of the agent), DRIVER_URL
// (the Go test's driver: POST /turn sends a turn with a tool call and a call that needs
// an approval and answers once the driver saw the request; POST /approve approves it
// and answers with the [{seq, type}] the driver got through the turn's turn/end),
// SCREENSHOT_DIR, CHROMIUM. Exits non-zero on failure.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WAIT_MS, lastReply, launch, logSeqs, logTypes, status, turnEnds, until, watch as watchFor } from './lib.mjs';

const base = process.argv[2];
const { AGENT_ID: agent, OBSERVER_TOKEN: token, DRIVER_URL: driver } = process.env;
if (!base || !agent || !token || !driver) {
  console.error('usage: AGENT_ID=… OBSERVER_TOKEN=… DRIVER_URL=… node observer.test.mjs PAGE_URL');
  process.exit(2);
}
const shots = process.env.SCREENSHOT_DIR || '';

async function drive(path) {
  const r = await fetch(driver + path, { method: 'POST', signal: AbortSignal.timeout(4 * WAIT_MS) });
  const body = await r.text();
  if (!r.ok) throw new Error(`driver ${path}: ${r.status} ${body}`);
  return body ? JSON.parse(body) : null;
}

// Every control of the page that could send a control frame.
const controls = (page) => [
  page.getByLabel('Message', { exact: true }),
  page.getByLabel('wake'),
  page.getByRole('button', { name: 'Send', exact: true }),
  page.getByRole('button', { name: 'Cancel turn', exact: true }),
  page.getByLabel('Model role', { exact: true }),
  page.getByLabel('Spec', { exact: true }),
  page.getByRole('button', { name: 'Set model', exact: true }),
  page.getByLabel('Allowed tools', { exact: true }),
  page.getByRole('button', { name: 'Set policy', exact: true }),
];

async function assertReadOnly(page, when) {
  for (const c of controls(page)) assert.ok(await c.isDisabled(), `${when}: ${c} is enabled on the observer's page`);
  assert.equal(await page.evaluate(() => document.body.dataset.role), 'observer', `${when}: the page is not in its observer view`);
}

const problems = [];
const browser = await launch();
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
watchFor(page, 'observer', problems);
// Every frame the page sends on its sockets: an observer's page sends subscribe (and
// the keepalive) and nothing else.
const sent = [];
page.on('websocket', (ws) => ws.on('framesent', (f) => sent.push(typeof f.payload === 'string' ? f.payload : f.payload.toString())));
let failed = false;
try {
  // The share link: the page takes the token off the address, connects and subscribes.
  await page.goto(new URL(`/#agent=${encodeURIComponent(agent)}&observe=${encodeURIComponent(token)}`, base).href);
  await until('the observer connected', async () => (await status(page)).includes('Read-only: observer token.'));
  assert.ok((await status(page)).startsWith(`Connected to session ${agent} `), await status(page));
  assert.equal(new URL(page.url()).hash, '', 'the share link (and its token) stays in the address bar');
  await until('session/created at seq 0 in the log', async () => (await logSeqs(page))[0] === 0);
  await assertReadOnly(page, 'connected');

  // The driver's turn: a tool call, then a call that waits for the driver's approval.
  await drive('/turn');
  const request = page.locator('#chat li.approval');
  await until('the approval request on the page', async () => (await request.count()) === 1);
  assert.equal(await request.locator('.text').textContent(), 'guarded_echo({"text":"approve me"})');
  const buttons = request.locator('.actions button');
  assert.equal(await buttons.count(), 2, 'the request shows Approve and Deny');
  for (const b of await buttons.all()) assert.ok(await b.isDisabled(), `${await b.textContent()} is enabled on the observer's page`);
  await assertReadOnly(page, 'approval standing');
  if (shots) await page.screenshot({ path: join(shots, 'observer-approval.png'), fullPage: true });

  // The driver approves; the turn ends. The page shows what the driver got, in order.
  const seen = await drive('/approve');
  const end = seen.at(-1);
  assert.equal(end.type, 'turn/end');
  await until('the turn/end on the page', async () => (await logSeqs(page)).includes(end.seq));
  const seqs = await logSeqs(page);
  const types = await logTypes(page);
  const shown = seqs.map((seq, i) => ({ seq, type: types[i] })).filter((e) => e.seq <= end.seq);
  assert.deepEqual(shown, seen, "the page's events through turn/end are not the driver's, in its order");
  for (const t of ['turn/start', 'tool/call', 'tool/result', 'approval/requested', 'approval/resolved', 'assistant/chunk', 'turn/end']) {
    assert.ok(types.includes(t), `no ${t} on the page`);
  }
  assert.deepEqual(await turnEnds(page), ['completed']);
  assert.equal(await lastReply(page), 'observed and done');
  assert.equal(await page.locator('#chat li.tool:not(.approval) .result').first().textContent(), 'result: {"text":"seen by the observer"}');
  assert.equal(await request.locator('.verdict').textContent(), 'Approved.');
  assert.equal(await request.locator('.result').textContent(), 'result: {"text":"approve me"}');
  await assertReadOnly(page, 'after the turn');

  // Enter in the message box sends nothing, even when forced past the disabled box.
  await page.evaluate(() => {
    const m = document.getElementById('message');
    m.value = 'an observer typing';
    m.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    document.getElementById('send-form').requestSubmit();
  });
  await page.evaluate(() => document.querySelector('#chat li.approval .actions button')?.click());
  // Nothing answers a frame that was not sent: give one that was sent time to show.
  await new Promise((r) => setTimeout(r, 1000));

  // Still connected, nothing refused, and the page sent subscribe alone.
  assert.ok((await status(page)).startsWith(`Connected to session ${agent} `), `the observer's page is not connected: ${await status(page)}`);
  assert.ok(await page.locator('#error').isHidden(), `the page shows an error: ${await page.locator('#error').textContent()}`);
  assert.equal(await page.locator('#log li.proto.error').count(), 0, 'the observer got an error frame');
  const kinds = sent.map((s) => JSON.parse(s).type);
  assert.ok(kinds.length >= 1 && kinds.every((k) => k === 'subscribe' || k === 'keepalive'), `the observer's page sent ${JSON.stringify(sent)}`);
  assert.deepEqual(problems, [], 'uncaught errors in the page');
  console.log(`ok: observer view of agent ${agent} followed seqs 0..${end.seq} as the driver got them; controls disabled; frames sent: ${kinds.join(', ')}`);
} catch (err) {
  failed = true;
  console.error('FAIL:', err.stack || err);
  if (problems.length) console.error('page errors:', problems);
  console.error(`status: ${await status(page).catch(() => '?')}`);
  console.error(`frames sent: ${JSON.stringify(sent)}`);
  const rows = await page.locator('#log li').evaluateAll((ls) => ls.map((l) => [...l.children].filter((c) => c.tagName !== 'DETAILS').map((c) => c.textContent).join(' '))).catch(() => []);
  console.error(rows.slice(-60).join('\n'));
  const dir = shots || mkdtempSync(join(tmpdir(), 'terret-web-'));
  await page.screenshot({ path: join(dir, 'failure.png'), fullPage: true }).catch((e) => console.error('screenshot:', e.message));
  console.error('screenshot:', join(dir, 'failure.png'));
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
