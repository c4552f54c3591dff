// End-to-end test of the terret dev page in headless Chromium (Debian's /usr/bin/chromium,
// driven by playwright-core). internal/webui's Go test starts the stack and runs:
//
//   node web-tests/chat.test.mjs http://127.0.0.1:PORT/
//
// Environment: AGENT_ID (default: a fresh id), SCREENSHOT_DIR (where failure.png goes,
// and approval.png, chat.png and page.png of a passing run), CHROMIUM (default
// /usr/bin/chromium). Exits non-zero on failure.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const base = process.argv[2];
if (!base) {
  console.error('usage: node chat.test.mjs PAGE_URL');
  process.exit(2);
}
const agent = process.env.AGENT_ID || 'web-' + randomBytes(4).toString('hex');
const shots = process.env.SCREENSHOT_DIR || '';
const WAIT_MS = 20000; // per step: a shared, loaded DynamoDB Local makes a turn take seconds

// Polls check until it returns a truthy value; fails with what and the last value seen.
async function until(what, check, timeout = WAIT_MS) {
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

const problems = []; // uncaught page errors fail the test
function watch(page, name) {
  page.on('pageerror', (err) => problems.push(`${name}: ${err.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') console.error(`[${name} console] ${m.text()}`);
  });
}

// Everything a page shows that the test reads.
const status = (page) => page.locator('#status').textContent();
const logSeqs = (page) => page.locator('#log li.event .seq').allTextContents().then((s) => s.map(Number));
const logTypes = (page) => page.locator('#log li.event .type').allTextContents();
const lastReply = (page) => page.locator('#chat li.assistant[data-final="true"] .text').last().textContent();
const turnEnds = (page) => page.locator('#chat li.turn.end').evaluateAll((ls) => ls.map((l) => l.dataset.status));

// Saves a picture of the page into SCREENSHOT_DIR, when one is given.
async function shot(page, name) {
  if (shots) await page.screenshot({ path: join(shots, name), fullPage: true });
}

async function connect(page, fromSeq) {
  await page.getByLabel('Agent id', { exact: true }).fill(agent);
  if (fromSeq !== undefined) await page.getByLabel('Subscribe from seq', { exact: true }).fill(String(fromSeq));
  await page.getByRole('button', { name: 'Dev token', exact: true }).click();
  await until('a dev token in the token field', async () => /^tt_/.test(await page.getByLabel('Token', { exact: true }).inputValue()));
  await page.getByRole('button', { name: 'Connect', exact: true }).click();
  await until('hello', async () => (await status(page)).startsWith(`Connected to session ${agent} `));
}

async function say(page, text) {
  await page.getByLabel('Message', { exact: true }).fill(text);
  await page.getByRole('button', { name: 'Send', exact: true }).click();
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  chromiumSandbox: false,
  args: ['--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
const page = await context.newPage();
watch(page, 'page');
let current = page;
let failed = false;
try {
  await page.goto(base);
  assert.equal(await page.title(), 'terret dev');

  // Connect with a dev token: hello, then the replay from 0 (session/created).
  await connect(page);
  await until('session/created at seq 0 in the log', async () => (await logSeqs(page))[0] === 0);
  assert.deepEqual((await logTypes(page))[0], 'session/created');

  // Plain text: the scripted model replies with exactly that text, streamed in chunks.
  const text = 'Hello from the browser, <b>not bold</b> & all';
  await say(page, text);
  await until('the first turn to end', async () => (await turnEnds(page)).length === 1);
  assert.deepEqual(await turnEnds(page), ['completed']);
  assert.equal(await lastReply(page), text);
  assert.equal(await page.locator('#chat li.user .text').last().textContent(), text);
  assert.equal(await page.locator('#chat b').count(), 0, 'event text must never become markup');
  const types = await logTypes(page);
  for (const t of ['user/message', 'turn/start', 'assistant/chunk', 'turn/end']) {
    assert.ok(types.includes(t), `log lacks ${t}: ${types}`);
  }
  assert.ok(types.filter((t) => t === 'assistant/chunk').length >= 2, `reply not streamed in chunks: ${types}`);

  // A parked guarded_echo: Approve runs it and the script says "done".
  await say(page, JSON.stringify({ script: [{ call: [{ tool: 'guarded_echo', args: { text: 'hi' } }] }, { say: 'done' }] }));
  const approve = page.getByRole('button', { name: 'Approve', exact: true });
  await approve.waitFor({ timeout: WAIT_MS });
  await shot(page, 'approval.png');
  assert.match(await page.locator('#chat li.approval .text').textContent(), /^guarded_echo\(\{"text":"hi"\}\)$/);
  await approve.click();
  await until('the second turn to end', async () => (await turnEnds(page)).length === 2);
  assert.deepEqual(await turnEnds(page), ['completed', 'completed']);
  assert.equal(await lastReply(page), 'done');
  assert.equal(await page.locator('#chat li.approval .verdict').textContent(), 'Approved.');
  assert.equal(await page.getByRole('button', { name: 'Approve', exact: true }).count(), 0, 'no request is standing any more');
  assert.equal(await page.locator('#chat li.tool .result').last().textContent(), 'result: {"text":"hi"}');
  await shot(page, 'chat.png');

  // Every event, with its seq, once and in order: 0, 1, 2, … gapless.
  const seqs = await logSeqs(page);
  assert.deepEqual(seqs, seqs.map((_, i) => i), 'log seqs are not 0..n gapless');
  const last = seqs.at(-1);
  assert.ok((await logTypes(page)).includes('approval/requested') && (await logTypes(page)).includes('approval/resolved'));

  // A reload resumes after the last seq kept in localStorage: nothing is replayed twice.
  await page.reload();
  assert.equal(await page.getByLabel('Agent id', { exact: true }).inputValue(), agent);
  assert.equal(await page.getByLabel('Subscribe from seq', { exact: true }).inputValue(), String(last + 1));
  await connect(page);
  await until('the subscribe frame', async () => (await page.locator('#log li.out .detail').allTextContents()).includes(`{"type":"subscribe","from_seq":${last + 1},"batch":true}`));
  await say(page, 'again');
  await until('the resumed turn to end', async () => (await turnEnds(page)).length === 1);
  assert.equal(await lastReply(page), 'again');
  assert.equal((await logSeqs(page))[0], last + 1, 'resumed stream does not start at last seq + 1');

  // A second page for the same agent supersedes the first, which stops reconnecting.
  const second = await context.newPage();
  watch(second, 'second');
  current = second;
  await second.goto(base);
  // A from seq beyond the log's tip (a stored seq of an older, in-memory log) falls back to 0.
  await connect(second, 999);
  await until('superseded on the first page', async () => (await status(page)).startsWith('Stopped: superseded'));
  await until('the whole log replayed on the second page', async () => (await logSeqs(second)).at(-1) === (await logSeqs(page)).at(-1));
  const replayed = await logSeqs(second);
  assert.deepEqual(replayed, replayed.map((_, i) => i), 'replay from 0 is not 0..n gapless');
  assert.match(await second.locator('#chat li.note.warn').textContent(), /^Seq 998 is beyond this session's last seq \d+: replaying from 0\.$/);
  assert.deepEqual(await turnEnds(second), ['completed', 'completed', 'completed']);
  assert.equal(await second.locator('#chat li.approval .verdict').textContent(), 'Approved.');
  assert.equal(await second.getByRole('button', { name: 'Approve', exact: true }).count(), 0, 'a resolved request replays as standing');
  assert.match(await page.getByRole('alert').textContent(), /^superseded: /);
  await new Promise((r) => setTimeout(r, 1200)); // longer than the first reconnect backoff
  assert.ok((await status(page)).startsWith('Stopped: superseded'), 'the superseded page reconnected');
  assert.ok((await status(second)).startsWith(`Connected to session ${agent} `), await status(second));
  current = page;

  // Cancel a turn parked on an approval: the standing request is denied, the turn cancelled.
  const ends = (await turnEnds(second)).length;
  await say(second, JSON.stringify({ script: [{ call: [{ tool: 'guarded_echo', args: { text: 'no' } }] }, { say: 'never' }] }));
  await second.getByRole('button', { name: 'Deny', exact: true }).waitFor({ timeout: WAIT_MS });
  await second.getByRole('button', { name: 'Cancel turn', exact: true }).click();
  await until('the cancelled turn to end', async () => (await turnEnds(second)).length === ends + 1);
  assert.equal((await turnEnds(second)).at(-1), 'cancelled');
  assert.match(await second.locator('#chat li.approval .verdict').last().textContent(), /^Denied/);
  assert.equal(await second.getByRole('button', { name: 'Deny', exact: true }).count(), 0, 'a request of a closed turn is still standing');

  // Cancel with no turn running: the server's not_running error is shown, the socket stays.
  await second.getByRole('button', { name: 'Cancel turn', exact: true }).click();
  await until('not_running', async () => /^not_running: /.test(await second.getByRole('alert').textContent()));
  assert.ok((await status(second)).startsWith('Connected'), await status(second));

  assert.deepEqual(problems, [], 'uncaught errors in the page');
  console.log(`ok: chat, approval, resume from seq ${last + 1}, replay from 0, superseded, cancel, not_running (agent ${agent})`);
} catch (err) {
  failed = true;
  console.error('FAIL:', err.stack || err);
  if (problems.length) console.error('page errors:', problems);
  for (const p of context.pages()) {
    console.error(`--- ${p === page ? 'page' : 'second'}: status: ${await status(p).catch(() => '?')}`);
    const rows = await p.locator('#log li').evaluateAll((ls) => ls.map((l) => [...l.children].map((c) => c.textContent).join(' '))).catch(() => []);
    console.error(rows.slice(-60).join('\n'));
  }
  const dir = shots || mkdtempSync(join(tmpdir(), 'terret-web-'));
  const file = join(dir, 'failure.png');
  await current.screenshot({ path: file, fullPage: true }).catch((e) => console.error('screenshot:', e.message));
  console.error('screenshot:', file);
} finally {
  if (shots && !failed) await context.pages().at(-1).screenshot({ path: join(shots, 'page.png'), fullPage: true }).catch(() => {});
  await browser.close();
}
process.exit(failed ? 1 : 0);
