// The log over HTTP against a real `terret dev`: a LogReader over Server-Sent Events and
// over long-polls follows a turn driven on the socket — the same envelopes, gapless, the
// same cursor — and resumes from its cursor after a close without a gap or a duplicate.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { LogReader, MemoryCursor, TerretClient, eventsURL, readEvents } from '../dist/index.js';
import { e2e, id, startDev, until } from './dev.mjs';

const opts = { ...e2e(), concurrency: true };

describe('the log over HTTP against terret dev', opts, () => {
  let dev;
  before(async () => {
    dev = await startDev();
  });
  after(async () => {
    await dev?.stop();
  });

  /** drive runs n turns on the socket and returns the envelopes it received, as JSON. */
  async function drive(agent, token, n, socket) {
    const events = socket?.events ?? [];
    const client = socket?.client ?? new TerretClient({ url: dev.url(agent), token, auth: 'header', WebSocket, onEvent: (ev) => { events.push(ev); } });
    if (!socket) await client.connect();
    const ends = () => events.filter((e) => e.type === 'turn/end').length;
    const before = ends();
    for (let i = 0; i < n; i++) {
      await client.inject(`turn ${before + i}`, { wake: true });
      await until(`turn/end ${before + i + 1}`, () => ends() >= before + i + 1);
    }
    return { client, events };
  }

  for (const mode of ['sse', 'poll']) {
    test(`${mode}: the same events as the socket, live, and a resume from the cursor`, async () => {
      const agent = id(mode);
      const token = await dev.token(agent);
      const socket = await drive(agent, token, 1);
      const got = [];
      const cursor = new MemoryCursor();
      let reader = new LogReader({ url: dev.url(agent), token, mode, cursor, onEvent: (ev) => { got.push(ev); }, retryMs: 50 });
      const done = reader.start();
      await until('the replay over HTTP', () => got.length >= socket.events.length);
      await drive(agent, token, 1, socket); // the live tail
      await until('the live tail over HTTP', () => got.length >= socket.events.length);
      reader.close();
      await done;
      const cut = got.length;
      await drive(agent, token, 1, socket); // while nobody reads over HTTP
      reader = new LogReader({ url: dev.url(agent), token, mode, cursor, onEvent: (ev) => { got.push(ev); }, retryMs: 50 });
      const done2 = reader.start();
      await until('the events appended while closed', () => got.length >= socket.events.length);
      reader.close();
      await done2;
      assert.ok(cut < got.length);
      assert.deepEqual(got.map((e) => e.seq), socket.events.map((e) => e.seq), 'gapless, once each, as on the socket');
      assert.deepEqual(got.map((e) => JSON.stringify(e)), socket.events.map((e) => JSON.stringify(e)), 'the same envelopes');
      assert.equal(cursor.load(), got.at(-1).seq);
      await socket.client.close();
    });
  }

  test('readEvents: a page, and a bad token is unauthorized', async () => {
    const agent = id('page');
    const token = await dev.token(agent);
    const socket = await drive(agent, token, 1);
    try {
      const url = eventsURL(dev.url(agent));
      const end = socket.events.findLast((e) => e.type === 'turn/end').seq;
      const p = await readEvents(url, token, 1, { limit: 2 });
      assert.deepEqual(p.events.map((e) => e.seq), [1, 2]);
      assert.equal(p.next_seq, 3);
      // The log's tip when the page was read: at least the turn's end, at most what the
      // socket has now (an event appended after the turn, its title, may come either side).
      assert.ok(p.last_seq >= end && p.last_seq <= socket.events.at(-1).seq, `last_seq ${p.last_seq}: want ${end}..${socket.events.at(-1).seq}`);
      await assert.rejects(readEvents(url, 'tt_nope', 0), (err) => err.code === 'unauthorized');
    } finally {
      await socket.client.close();
    }
  });
});
