// End-to-end test of the terret dev page (built on @terret/client) in headless Chromium
// (Debian's /usr/bin/chromium, driven by playwright-core). internal/webui's Go test starts
// the stack (approvals mounted, replay limit 8) and runs:
//
//   node web-tests/chat.test.mjs http://127.0.0.1:PORT/
//
// The page's socket goes through a TCP proxy this script runs, so the test can cut it as
// a network failure would. Environment: AGENT_ID (default: a fresh id), SCREENSHOT_DIR
// (where failure.png goes, and approval.png and page.png of a passing run), CHROMIUM
// (default /usr/bin/chromium). Exits non-zero on failure.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  WAIT_MS, connect as connectAs, lastReply, launch, logSeqs, logTypes, proxyTo, say, state, status, turnEnds, until, watch as watchFor,
} from './lib.mjs';

const base = process.argv[2];
if (!base) {
  console.error('usage: node chat.test.mjs PAGE_URL');
  process.exit(2);
}
const agent = process.env.AGENT_ID || 'web-' + randomBytes(4).toString('hex');
const shots = process.env.SCREENSHOT_DIR || '';

const problems = []; // uncaught page errors fail the test
const watch = (page, name) => watchFor(page, name, problems);
const connect = (page, server, fromSeq) => connectAs(page, server, agent, fromSeq);

async function shot(page, name) {
  if (shots) await page.screenshot({ path: join(shots, name), fullPage: true });
}

const proxy = await proxyTo(new URL(base));
const browser = await launch();
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
watch(page, 'page');
let current = page;
let failed = false;
try {
  await page.goto(base);
  assert.equal(await page.title(), 'terret dev');

  // Connect through the proxy with a dev token: hello, then the replay from 0.
  await connect(page, proxy.url);
  await until('session/created at seq 0 in the log', async () => (await logSeqs(page))[0] === 0);
  assert.equal((await logTypes(page))[0], 'session/created');

  // A turn: the scripted model replies with exactly the text, streamed in chunks.
  const text = 'Hello from the browser, <b>not bold</b> & all';
  await say(page, text);
  await until('the first turn to end', async () => (await turnEnds(page)).length === 1);
  assert.deepEqual(await turnEnds(page), ['completed']);
  assert.equal(await lastReply(page), text);
  assert.equal(await page.locator('#chat li.user .text').last().textContent(), text);
  assert.equal(await page.locator('#chat b').count(), 0, 'event text must never become markup');
  const types = await logTypes(page);
  assert.ok(types.filter((t) => t === 'assistant/chunk').length >= 2, `reply not streamed in chunks: ${types}`);
  // Each event row carries its raw JSON.
  const row = page.locator('#log li.event').filter({ hasText: 'user/message' }).first();
  await row.locator('details summary').click();
  const raw = JSON.parse(await row.locator('details pre').textContent());
  assert.equal(raw.type, 'user/message');
  assert.equal(raw.payload.text, text);

  // A forced reconnect: the network drops; the page says so, reconnects, resumes.
  await until('the first session/titled', async () => (await logTypes(page)).includes('session/titled'));
  const before = (await logSeqs(page)).at(-1);
  assert.ok(proxy.cut() >= 1, 'no connection to cut');
  await until('the reconnect', async () => (await status(page)).endsWith('Reconnected.'));
  await say(page, 'after the cut');
  await until('the second turn to end', async () => (await turnEnds(page)).length === 2);
  assert.equal(await lastReply(page), 'after the cut');
  assert.ok((await page.locator('#log li.proto.warn').filter({ hasText: 'connection lost' }).count()) >= 1, 'the drop is not in the log');
  let seqs = await logSeqs(page);
  assert.deepEqual(seqs, seqs.map((_, i) => i), `log seqs are not 0..n once each after the reconnect: ${seqs}`);
  assert.ok(seqs.at(-1) > before);

  // An approval: guarded_echo parks; Approve runs it and the script says "done".
  await say(page, JSON.stringify({ script: [{ call: [{ tool: 'guarded_echo', args: { text: 'hi' } }] }, { say: 'done' }] }));
  const approve = page.getByRole('button', { name: 'Approve', exact: true });
  await approve.waitFor({ timeout: WAIT_MS });
  await shot(page, 'approval.png');
  assert.equal(await page.locator('#chat li.approval .text').textContent(), 'guarded_echo({"text":"hi"})');
  await approve.click();
  await until('the third turn to end', async () => (await turnEnds(page)).length === 3);
  assert.deepEqual(await turnEnds(page), ['completed', 'completed', 'completed']);
  assert.equal(await lastReply(page), 'done');
  assert.equal(await page.locator('#chat li.approval .verdict').textContent(), 'Approved.');
  assert.equal(await page.locator('#chat li.approval .result').textContent(), 'result: {"text":"hi"}');
  assert.equal(await approve.count(), 0, 'no request is standing any more');

  // Model and policy controls.
  await page.getByLabel('Allowed tools', { exact: true }).fill('echo clock');
  await page.getByRole('button', { name: 'Set policy', exact: true }).click();
  await until('the policy in force', async () => (await page.locator('#policy-now').textContent()) === 'echo clock');
  await page.getByLabel('Spec', { exact: true }).fill('not a spec');
  await page.getByRole('button', { name: 'Set model', exact: true }).click();
  await until('bad_frame for a bad model spec', async () => /^bad_frame: /.test(await page.getByRole('alert').textContent()));
  await page.getByLabel('Spec', { exact: true }).fill('scripted');
  await page.getByRole('button', { name: 'Set model', exact: true }).click();
  seqs = await logSeqs(page);
  assert.deepEqual(seqs, seqs.map((_, i) => i), 'log seqs are not 0..n gapless');
  const last = seqs.at(-1);

  // A reload remembers the agent (the recent list) and resumes after the stored seq.
  await page.reload();
  assert.equal(await page.getByLabel('Agent id', { exact: true }).inputValue(), agent);
  assert.deepEqual(await page.locator('#recent .recent-agent').allTextContents(), [agent]);
  assert.equal(await page.getByLabel('Subscribe from seq', { exact: true }).inputValue(), String(last + 1));
  await connect(page, proxy.url);
  await page.getByLabel('Allowed tools', { exact: true }).fill('*');
  await page.getByRole('button', { name: 'Set policy', exact: true }).click();
  await until('the policy in force', async () => (await page.locator('#policy-now').textContent()) === '*');
  assert.deepEqual(await logSeqs(page), [last + 1], 'the resumed stream does not start at the stored seq + 1');

  // A second page from seq 0 supersedes the first (which stops for good), and its replay
  // is capped at the server's replay limit: the truncation is shown.
  const second = await context.newPage();
  watch(second, 'second');
  current = second;
  await second.goto(base);
  await connect(second, proxy.url, 0);
  await until('superseded on the first page', async () => (await status(page)).startsWith('Stopped: superseded'));
  assert.equal(await state(page), 'stopped');
  assert.equal(await page.locator('#error').textContent(), `Superseded: another client connected to agent ${agent}. An agent has one connection at a time and the newest wins: terret chat, terret tail and this page on one agent take it from each other. Close the other client (or use another agent id), then press Connect.`, 'the superseded page does not say what happened and what to do');
  await until('the truncation note', async () => (await second.locator('#chat li.note.warn.replay_truncated').count()) === 1);
  assert.match(await second.locator('#chat li.note.warn.replay_truncated').textContent(), /^Events 0–\d+ are not available over the socket; showing from \d+\.$/);
  // The note comes with the first replayed frame; the rows of its events follow it.
  await until('the replay up to the resumed stream\'s event', async () => (await logSeqs(second)).includes(last + 1));
  const replayed = await logSeqs(second);
  assert.ok(replayed[0] > 0, `the replay was not truncated: ${replayed}`);
  assert.deepEqual(replayed, replayed.map((_, i) => replayed[0] + i), 'the truncated replay is not gapless');
  await new Promise((r) => setTimeout(r, 1500)); // longer than the first reconnect backoff
  assert.ok((await status(page)).startsWith('Stopped: superseded'), 'the superseded page reconnected');
  current = page;

  assert.deepEqual(problems, [], 'uncaught errors in the page');
  console.log(`ok: turn, raw JSON, forced reconnect, approval, policy/model, resume from seq ${last + 1}, superseded, truncated replay (agent ${agent})`);
} catch (err) {
  failed = true;
  console.error('FAIL:', err.stack || err);
  if (problems.length) console.error('page errors:', problems);
  for (const p of context.pages()) {
    console.error(`--- ${p === page ? 'page' : 'second'}: status: ${await status(p).catch(() => '?')}`);
    const rows = await p.locator('#log li').evaluateAll((ls) => ls.map((l) => [...l.children].filter((c) => c.tagName !== 'DETAILS').map((c) => c.textContent).join(' '))).catch(() => []);
    console.error(rows.slice(-60).join('\n'));
  }
  const dir = shots || mkdtempSync(join(tmpdir(), 'terret-web-'));
  const file = join(dir, 'failure.png');
  await current.screenshot({ path: file, fullPage: true }).catch((e) => console.error('screenshot:', e.message));
  console.error('screenshot:', file);
} finally {
  if (shots && !failed) await context.pages().at(-1).screenshot({ path: join(shots, 'page.png'), fullPage: true }).catch(() => {});
  await browser.close();
  await proxy.close();
}
process.exit(failed ? 1 : 0);
