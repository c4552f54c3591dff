// LogReader across a reset of the log it reads: the server's answers are scripted (a
// fetch of the test's), so each step is exact. Over Server-Sent Events the stream ends
// with `event: error` (the socket's error{internal}); the reader reconnects, finds the
// new epoch in hello and reads the new log from 0. Over long-polls a page names the new
// epoch and the reader starts over from 0. A cursor recorded under another epoch is not
// resumed.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LogReader, MemoryCursor, ProtocolError } from '../dist/index.js';

const hello = (epoch, last) => ({ event: 'hello', data: { type: 'hello', proto: 1, session_id: 'a1', last_seq: last, epoch } });
const ev = (seq, epoch) => ({ id: String(seq), data: { id: `${epoch}-${seq}`, session_id: 'a1', seq, at: '2026-01-01T00:00:00.000000Z', type: 'test/event', payload: {} } });
const reset = { event: 'error', data: { type: 'error', code: 'internal', message: 'session reset: reconnect and start over from seq 0' } };

function sseText(records) {
  return records.map((r) => (r.event ? `event: ${r.event}\n` : '') + (r.id ? `id: ${r.id}\n` : '') + `data: ${JSON.stringify(r.data)}\n\n`).join('');
}

/** answer is a 200 whose body is text, then the end — or, with hang, nothing more until the request is aborted. */
function answer(text, hang, signal) {
  const chunks = [new TextEncoder().encode(text)];
  return {
    ok: true,
    status: 200,
    text: () => (hang ? new Promise((_, reject) => signal?.addEventListener('abort', () => reject(new Error('aborted')))) : Promise.resolve(text)),
    body: {
      getReader: () => ({
        read: () => {
          if (chunks.length) return Promise.resolve({ value: chunks.shift(), done: false });
          if (!hang) return Promise.resolve({ done: true });
          return new Promise((_, reject) => {
            if (signal?.aborted) reject(new Error('aborted'));
            signal?.addEventListener('abort', () => reject(new Error('aborted')));
          });
        },
      }),
    },
  };
}

/** scripted returns a fetch that answers the i-th request with steps[i] and records each request. */
function scripted(steps) {
  const requests = [];
  const fetch = async (url, init) => {
    const u = new URL(url);
    requests.push({ from: u.searchParams.get('from_seq'), lastEventId: init.headers['Last-Event-ID'] ?? null, wait: u.searchParams.get('wait') });
    const step = steps[requests.length - 1];
    if (!step) return answer('', true, init.signal);
    return step(init.signal);
  };
  return { fetch, requests };
}

async function until(what, check) {
  const deadline = Date.now() + 10000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

test('sse: a reset ends the stream; the reader reads the new log from 0', async () => {
  const { fetch, requests } = scripted([
    () => answer(sseText([hello('A', 2), ev(0, 'A'), ev(1, 'A'), ev(2, 'A'), reset]), false),
    // The reconnect from the old position: the new log's hello, and an event that must not be taken as seq 3 of the old one.
    (signal) => answer(sseText([hello('B', 3), ev(3, 'B')]), true, signal),
    (signal) => answer(sseText([hello('B', 3), ev(0, 'B'), ev(1, 'B')]), true, signal),
  ]);
  const got = [];
  const errors = [];
  const changes = [];
  const cursor = new MemoryCursor();
  const reader = new LogReader({
    url: 'http://127.0.0.1:1/agents/a1/events', token: 't', cursor, fetch, retryMs: 1,
    onEvent: (e) => { got.push(e.id); },
    onError: (err) => errors.push(err),
    onEpochChanged: (old, epoch) => changes.push([old, epoch]),
  });
  const done = reader.start();
  await until('the new log read', () => got.length === 5);
  reader.close();
  await done;
  assert.deepEqual(got, ['A-0', 'A-1', 'A-2', 'B-0', 'B-1']);
  assert.equal(errors.length, 1);
  assert.ok(errors[0] instanceof ProtocolError && errors[0].code === 'internal', `error ${errors[0]}`);
  assert.deepEqual(changes, [['A', 'B']]);
  assert.deepEqual(requests.map((r) => [r.from, r.lastEventId]), [['0', null], ['3', '2'], ['0', null]]);
  assert.equal(cursor.loadEpoch(), 'B');
  assert.equal(cursor.load(), 1);
});

test('sse: a delete (unauthorized) stops the reader', async () => {
  const { fetch } = scripted([
    () => answer(sseText([hello('A', 0), ev(0, 'A'), { event: 'error', data: { type: 'error', code: 'unauthorized', message: 'missing, invalid or revoked token' } }]), false),
  ]);
  const reader = new LogReader({ url: 'http://127.0.0.1:1/agents/a1/events', token: 't', fetch, retryMs: 1, onEvent: () => {} });
  await assert.rejects(reader.start(), (err) => err instanceof ProtocolError && err.code === 'unauthorized');
});

test('sse: a cursor recorded under another epoch starts over from 0', async () => {
  const { fetch, requests } = scripted([
    (signal) => answer(sseText([hello('B', 1), ev(6, 'B')]), true, signal),
    (signal) => answer(sseText([hello('B', 1), ev(0, 'B'), ev(1, 'B')]), true, signal),
  ]);
  const cursor = new MemoryCursor();
  cursor.storeEpoch('A', false);
  cursor.store(5);
  const got = [];
  const changes = [];
  const reader = new LogReader({
    url: 'http://127.0.0.1:1/agents/a1/events', token: 't', cursor, fetch, retryMs: 1,
    onEvent: (e) => { got.push(e.id); },
    onEpochChanged: (old, epoch) => changes.push([old, epoch]),
  });
  const done = reader.start();
  await until('the new log read', () => got.length === 2);
  reader.close();
  await done;
  assert.deepEqual(got, ['B-0', 'B-1']);
  assert.deepEqual(changes, [['A', 'B']]);
  assert.deepEqual(requests.map((r) => [r.from, r.lastEventId]), [['6', '5'], ['0', null]]);
});

test('poll: a page of a new epoch starts the reader over from 0', async () => {
  const page = (epoch, events, next, last, extra = {}) => () => answer(JSON.stringify({ epoch, events: events.map((e) => e.data), next_seq: next, last_seq: last, ...extra }), false);
  const { fetch, requests } = scripted([
    page('A', [ev(0, 'A'), ev(1, 'A')], 2, 1),
    page('B', [], 1, 0, { replay_truncated: { type: 'replay_truncated', requested_from_seq: 2, from_seq: 1 } }),
    page('B', [ev(0, 'B')], 1, 0),
  ]);
  const got = [];
  const changes = [];
  const truncated = [];
  const reader = new LogReader({
    url: 'http://127.0.0.1:1/agents/a1/events', token: 't', mode: 'poll', fetch, retryMs: 1,
    onEvent: (e) => { got.push(e.id); },
    onTruncated: (t) => truncated.push(t),
    onEpochChanged: (old, epoch) => changes.push([old, epoch]),
  });
  const done = reader.start();
  await until('the new log read', () => got.length === 3);
  reader.close();
  await done;
  assert.deepEqual(got, ['A-0', 'A-1', 'B-0']);
  assert.deepEqual(changes, [['A', 'B']]);
  assert.deepEqual(truncated, [], 'the new log\'s page past its tip is not a truncation of the old one');
  assert.deepEqual(requests.map((r) => r.from).slice(0, 3), ['0', '2', '0']);
});
