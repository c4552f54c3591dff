// The log's epoch against a real `terret dev`: a `terret session reset` while the client
// is connected makes it start over from seq 0 and say so (epoch_changed), and a cursor
// that kept its epoch across a client's life does the same at connect.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { MemoryCursor, StorageCursor, TerretClient } from '../dist/index.js';
import { e2e, id, startDev, until } from './dev.mjs';

/** open connects a client for agent and records events and notices in one trail. */
async function open(dev, agent, cursor) {
  const rec = { trail: [] };
  rec.client = new TerretClient({
    url: dev.url(agent), token: await dev.token(agent), auth: 'header', WebSocket, cursor,
    minBackoffMs: 20, maxBackoffMs: 200, connectTimeoutMs: 60000,
    onEvent: (ev) => rec.trail.push({ event: ev }),
    onNotice: (n) => rec.trail.push({ notice: n }),
  });
  rec.hello = await rec.client.connect();
  return rec;
}

function reset(dev, agent) {
  const out = dev.terret(['session', 'reset', '--agent', agent]);
  const m = /epoch (\S+)/.exec(out);
  assert.ok(m, `terret session reset printed ${out}`);
  return m[1];
}

describe('epoch against terret dev', { ...e2e(), concurrency: true }, () => {
  let dev;
  before(async () => {
    dev = await startDev([]);
  });
  after(async () => {
    await dev?.stop();
  });

  test('a reset while connected: epoch_changed, then the new log from seq 0', async () => {
    const agent = id('ep');
    const rec = await open(dev, agent, new MemoryCursor());
    const first = rec.hello.epoch;
    assert.ok(first, 'hello has an epoch');
    await rec.client.inject('hello', { wake: true });
    // session/titled follows the first turn: then the log is at rest.
    await until('session/titled', () => rec.trail.some((t) => t.event?.type === 'session/titled'));
    const before = rec.trail.length;
    const second = reset(dev, agent);
    assert.notEqual(second, first);
    await until('the new session/created', () => rec.trail.slice(before).some((t) => t.event?.seq === 0));
    const after = rec.trail.slice(before).filter((t) => t.event || t.notice?.type === 'epoch_changed');
    assert.deepEqual(after[0], { notice: { type: 'epoch_changed', old: first, epoch: second } });
    assert.equal(after[1].event.seq, 0);
    assert.equal(after[1].event.type, 'session/created');
    assert.equal(after[1].event.id, second);
    assert.equal(rec.client.hello.epoch, second);
    // The new log goes on from there, gapless.
    await rec.client.inject('again', { wake: true });
    await until('turn/end in the new log', () => rec.trail.slice(before).some((t) => t.event?.type === 'turn/end'));
    const seqs = rec.trail.slice(before).filter((t) => t.event).map((t) => t.event.seq);
    assert.deepEqual(seqs, seqs.map((_, i) => i));
    rec.client.close();
  });

  test('a cursor that kept its epoch starts over at connect after a reset', async () => {
    const agent = id('ep');
    const store = new Map();
    const storage = { getItem: (k) => store.get(k) ?? null, setItem: (k, v) => store.set(k, v) };
    const rec = await open(dev, agent, new StorageCursor('c', storage));
    await rec.client.inject('hello', { wake: true });
    await until('session/titled', () => rec.trail.some((t) => t.event?.type === 'session/titled'));
    rec.client.close();
    assert.equal(store.get('c:epoch'), rec.hello.epoch);
    assert.ok(Number(store.get('c')) > 0);
    const second = reset(dev, agent);
    const rec2 = await open(dev, agent, new StorageCursor('c', storage));
    await until('seq 0', () => rec2.trail.some((t) => t.event));
    assert.deepEqual(rec2.trail[0], { notice: { type: 'epoch_changed', old: rec.hello.epoch, epoch: second } });
    assert.equal(rec2.trail[1].event.seq, 0);
    assert.equal(rec2.trail[1].event.id, second);
    assert.equal(store.get('c:epoch'), second);
    rec2.client.close();
  });
});
