// Browser test of what a long session brings to the terret dev page, run by
// internal/webui's TestBrowserPage against the whole local stack:
//
//   EVENTS_URL=http://127.0.0.1:PORT node web-tests/page.test.mjs http://127.0.0.1:PORT/
//
// - a chat pane fuller than its height keeps the newest item entirely in view while an
//   answer streams, and a new approval's Approve/Deny buttons are visible even after
//   the user scrolled up;
// - events the page does not know, or whose payload is null, are shown raw and the page
//   goes on (EVENTS_URL writes them into the log: POST ?agent=ID&type=TYPE, body the
//   payload); context/compacted is a marker whose summary opens on click;
// - after those, a dropped socket is reconnected and the chat carries on;
// - an idle socket sends exactly {"type":"keepalive"} (the page's ?keepalive_ms=1500
//   cuts the 9-minute interval), and again when idle again; whether the server ignores
//   it or (without the keepalive route) answers bad_frame, no error is shown and the
//   socket stays open.
//
// Environment: AGENT_ID, SCREENSHOT_DIR (failure.png), CHROMIUM. Exits non-zero on failure.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WAIT_MS, connect, lastReply, launch, logSeqs, logTypes, proxyTo, say, state, status, turnEnds, until, watch } from './lib.mjs';

const base = process.argv[2];
const eventsURL = process.env.EVENTS_URL;
if (!base || !eventsURL) {
  console.error('usage: EVENTS_URL=URL node page.test.mjs PAGE_URL');
  process.exit(2);
}
const agent = process.env.AGENT_ID || 'web-' + randomBytes(4).toString('hex');
const shots = process.env.SCREENSHOT_DIR || '';
const KEEPALIVE = '{"type":"keepalive"}';

// rawEvent writes an event into the log as it is, and returns its seq.
async function rawEvent(type, payload) {
  const r = await fetch(`${eventsURL}/?agent=${encodeURIComponent(agent)}&type=${encodeURIComponent(type)}`, { method: 'POST', body: payload });
  if (!r.ok) throw new Error(`write ${type}: ${r.status} ${await r.text()}`);
  return (await r.json()).seq;
}

// How far the chat pane is from showing its end, in pixels (0: the newest item entirely in view).
const shortOfEnd = (page) => page.locator('#chat').evaluate((c) => c.scrollHeight - c.scrollTop - c.clientHeight);
// Whether el lies entirely inside the chat pane's visible box.
const inChatView = (loc) => loc.evaluate((b) => {
  const c = document.getElementById('chat').getBoundingClientRect();
  const r = b.getBoundingClientRect();
  return r.height > 0 && r.top >= c.top - 0.5 && r.bottom <= c.bottom + 0.5;
});

const problems = [];
const proxy = await proxyTo(new URL(base));
const browser = await launch();
const context = await browser.newContext({ viewport: { width: 1100, height: 700 } });
const page = await context.newPage();
watch(page, 'page', problems);
const sent = []; // every text frame the page sent, in order
page.on('websocket', (ws) => ws.on('framesent', (f) => sent.push(String(f.payload))));
let failed = false;
try {
  const withKeepalive = new URL(base); // base ends in #key=… (the page key): the query goes before it
  withKeepalive.search = 'keepalive_ms=1500';
  await page.goto(withKeepalive.href);
  await connect(page, proxy.url, agent);

  // 1. More than the pane holds, streamed: the pane ends at the end of the answer.
  const lines = Array.from({ length: 60 }, (_, i) => `line ${i + 1} of a long answer`).join('\n');
  await say(page, JSON.stringify({ script: [{ say: lines, chunks: 30, delay_ms: 150 }] }));
  // Mid-stream, the growing answer's newest line is in view (read in one go, between two
  // of the page's tasks).
  const midStream = await until('the answer half streamed, past the pane', () => page.locator('#chat').evaluate((c) => {
    const a = c.querySelector('li.assistant.streaming');
    return a && a.textContent.includes('line 30 ') && c.scrollHeight > c.clientHeight + 100 ? { short: c.scrollHeight - c.scrollTop - c.clientHeight } : null;
  }));
  assert.ok(midStream.short <= 1, `mid-stream the pane is ${midStream.short} px short of its end`);
  await until('the long turn to end', async () => (await turnEnds(page)).length === 1);
  assert.equal(await lastReply(page), lines);
  const chat = page.locator('#chat');
  assert.ok(await chat.evaluate((c) => c.scrollHeight > 2 * c.clientHeight), 'the chat pane is not full');
  await until('the chat pane at its very end', async () => (await shortOfEnd(page)) <= 1);

  // 2. The user scrolls up; a new approval still shows its buttons.
  await chat.evaluate((c) => { c.scrollTop = 0; });
  await until('the pane scrolled up', async () => (await chat.evaluate((c) => c.scrollTop)) === 0);
  await say(page, JSON.stringify({ script: [{ call: [{ tool: 'guarded_echo', args: { text: 'visible?' } }] }, { say: 'done' }] }));
  const approve = page.getByRole('button', { name: 'Approve', exact: true });
  await approve.waitFor({ timeout: WAIT_MS });
  for (const b of [approve, page.getByRole('button', { name: 'Deny', exact: true })]) {
    await until(`the ${await b.textContent()} button inside the chat pane`, () => inChatView(b));
  }
  await approve.click();
  await until('the approved turn to end', async () => (await turnEnds(page)).length === 2);
  assert.equal(await lastReply(page), 'done');
  await until('the chat pane at its end again', async () => (await shortOfEnd(page)) <= 1);

  // 3. Odd events: a null payload, a type the page does not know, a compacted context.
  const nullSeq = await rawEvent('odd/null', 'null');
  const futureSeq = await rawEvent('future/thing', JSON.stringify({ x: 1 }));
  const summary = 'The user asked for a long answer and approved guarded_echo.';
  const compactedSeq = await rawEvent('context/compacted', JSON.stringify({ through_seq: nullSeq - 1, summary }));
  await until('the three events in the log pane', async () => (await logSeqs(page)).includes(compactedSeq));
  const types = await logTypes(page);
  for (const t of ['odd/null', 'future/thing', 'context/compacted']) assert.ok(types.includes(t), `no ${t} row in the log: ${types}`);
  const rawNull = page.locator(`#chat li.note.raw[data-seq="${nullSeq}"]`);
  assert.equal(await rawNull.locator('.who').textContent(), `odd/null (seq ${nullSeq}, payload not an object)`);
  assert.equal(JSON.parse(await rawNull.locator('pre').textContent()).payload, null);
  const rawFuture = page.locator(`#chat li.note.raw[data-seq="${futureSeq}"]`);
  assert.equal(await rawFuture.locator('.who').textContent(), `future/thing (seq ${futureSeq}, not known to this page)`);
  assert.deepEqual(JSON.parse(await rawFuture.locator('pre').textContent()).payload, { x: 1 });
  const marker = page.locator(`#chat li.note.compacted[data-seq="${compactedSeq}"]`);
  assert.equal(await marker.locator('summary').textContent(), `Earlier context summarised through seq ${nullSeq - 1}`);
  assert.equal(await marker.locator('.text').isVisible(), false, 'the summary is open before a click');
  await marker.locator('summary').click();
  assert.equal(await marker.locator('.text').textContent(), summary);
  assert.equal(await marker.locator('.text').isVisible(), true, 'the summary does not open');
  assert.equal(await state(page), 'connected');
  let seqs = await logSeqs(page);
  assert.deepEqual(seqs, seqs.map((_, i) => i), `log seqs are not 0..n: ${seqs}`);

  // 4. The page goes on: a dropped socket reconnects, and the next turn shows.
  assert.ok(proxy.cut() >= 1, 'no connection to cut');
  await until('the reconnect', async () => (await status(page)).endsWith('Reconnected.'));
  await say(page, 'after the odd events');
  await until('the turn after the reconnect to end', async () => (await turnEnds(page)).length === 3);
  assert.equal(await lastReply(page), 'after the odd events');
  seqs = await logSeqs(page);
  assert.deepEqual(seqs, seqs.map((_, i) => i), `log seqs are not 0..n after the reconnect: ${seqs}`);
  assert.equal(await rawNull.count(), 1, 'the null event was shown twice');

  // 5. Idle: the keepalive frame, exactly; the socket stays open and nothing is shown.
  const drops = await page.locator('#log li.proto.warn').filter({ hasText: 'connection lost' }).count();
  const before = sent.length;
  await until('a keepalive frame on the idle socket', () => sent.slice(before).includes(KEEPALIVE));
  // A second one: the socket stayed open (whether the server ignored the first, as
  // the keepalive route does, or refused it with bad_frame) and the idle timer re-armed.
  await until('a second keepalive frame', () => sent.slice(before).filter((f) => f === KEEPALIVE).length >= 2);
  assert.equal(await state(page), 'connected');
  assert.equal(await page.locator('#error').isHidden(), true, `an error is shown: ${await page.locator('#error').textContent()}`);
  assert.equal(await page.locator('#log li.proto.warn').filter({ hasText: 'connection lost' }).count(), drops, 'the keepalive cost a reconnect');
  assert.ok(sent.every((f) => f === KEEPALIVE || !f.includes('keepalive')), `a keepalive frame that is not exactly ${KEEPALIVE}`);

  assert.deepEqual(problems, [], 'uncaught errors in the page');
  console.log(`ok: full pane at its end, approval visible, null/unknown events raw, compacted marker, reconnect, keepalive (agent ${agent})`);
} catch (err) {
  failed = true;
  console.error('FAIL:', err.stack || err);
  if (problems.length) console.error('page errors:', problems);
  console.error(`status: ${await status(page).catch(() => '?')}`);
  const rows = await page.locator('#log li').evaluateAll((ls) => ls.map((l) => [...l.children].filter((c) => c.tagName !== 'DETAILS').map((c) => c.textContent).join(' '))).catch(() => []);
  console.error(rows.slice(-40).join('\n'));
  const dir = shots || mkdtempSync(join(tmpdir(), 'terret-web-'));
  const file = join(dir, 'failure.png');
  await page.screenshot({ path: file, fullPage: true }).catch((e) => console.error('screenshot:', e.message));
  console.error('screenshot:', file);
} finally {
  await browser.close();
  await proxy.close();
}
process.exit(failed ? 1 : 0);
