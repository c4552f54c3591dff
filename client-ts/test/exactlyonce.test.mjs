// Exactly-once control frames against a real terret dev: the client's resend of an
// inject lost with its socket, and frames posted over HTTP with an Idempotency-Key.
import assert from 'node:assert/strict';
import { createConnection, createServer } from 'node:net';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { ProtocolError, TerretClient, framesURL, sendFrame } from '../dist/index.js';
import { e2e, id, startDev, until } from './dev.mjs';

/** swallowProxy forwards TCP to target; while swallow is set, what the client sends is dropped. */
async function swallowProxy(target) {
  const [thost, tport] = target.split(':');
  const pairs = new Set();
  const p = { swallow: false };
  const server = createServer((down) => {
    const up = createConnection({ host: thost, port: Number(tport) });
    const pair = { up, down };
    pairs.add(pair);
    const end = () => {
      pairs.delete(pair);
      up.destroy();
      down.destroy();
    };
    up.on('data', (d) => down.write(d));
    down.on('data', (d) => {
      if (!p.swallow && !up.destroyed) up.write(d);
    });
    up.on('error', end).on('close', end);
    down.on('error', end).on('close', end);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  p.host = `127.0.0.1:${server.address().port}`;
  p.cutAll = () => {
    for (const x of [...pairs]) {
      x.up.destroy();
      x.down.destroy();
    }
    pairs.clear();
  };
  p.close = () => {
    p.cutAll();
    return new Promise((r) => server.close(r));
  };
  return p;
}

const injects = (events) => events.filter((e) => e.type === 'user/message' || e.type === 'context/injected');

describe('exactly-once frames against terret dev', { ...e2e(), concurrency: true }, () => {
  let dev;
  before(async () => {
    dev = await startDev();
  });
  after(async () => {
    await dev?.stop();
  });

  test('an inject lost with its socket is sent again after the reconnect, with its client_id, and lands once', async () => {
    const agent = id('resend');
    const proxy = await swallowProxy(dev.host);
    const events = [];
    const client = new TerretClient({
      url: dev.url(agent, proxy.host), token: await dev.token(agent), auth: 'header', WebSocket,
      minBackoffMs: 20, maxBackoffMs: 200, connectTimeoutMs: 60000, onEvent: (ev) => events.push(ev),
    });
    try {
      await client.connect();
      await until('session/created', () => events.length >= 1);
      proxy.swallow = true;
      await client.inject('lost', { wake: true });
      const [pending] = client.pending;
      assert.match(pending ?? '', /^c-[0-9a-f]{32}$/);
      proxy.cutAll();
      proxy.swallow = false;
      const um = await until('the resent inject\'s user/message', () => events.find((e) => e.type === 'user/message'));
      assert.equal(um.payload.text, 'lost');
      assert.equal(um.payload.client_id, pending);
      await until('turn/end', () => events.some((e) => e.type === 'turn/end'));
      assert.deepEqual(client.pending, []);

      // Landed (or not: the cut races it): once either way.
      await client.inject('landed', { wake: true });
      proxy.cutAll();
      // Written to the cut socket before the client saw it die, it rejects: kept all
      // the same, and sent again after the reconnect.
      await client.inject('after', { wake: true }).catch(() => {});
      await until('the turn of after to end', () => {
        const i = events.findIndex((e) => e.type === 'user/message' && e.payload.text === 'after');
        const j = events.findIndex((e) => e.type === 'context/injected' && e.payload.text === 'after');
        const at = Math.max(i, j);
        return at >= 0 && events.slice(at).some((e) => e.type === 'turn/end');
      });
      assert.deepEqual(injects(events).map((e) => e.payload.text), ['lost', 'landed', 'after']);
    } finally {
      await client.close();
      await proxy.close();
    }
  });

  test('sendFrame posts a frame over HTTP: a repeated key appends nothing; a refusal is the socket\'s code', async () => {
    const agent = id('http');
    const token = await dev.token(agent);
    const url = dev.url(agent);
    assert.equal(framesURL(url), `http://${dev.host}/agents/${agent}/frames`);
    for (let i = 0; i < 2; i++) {
      assert.equal(await sendFrame(url, token, { type: 'inject', text: 'over http', wake: true }, { idempotencyKey: 'k-1' }), 'k-1');
    }
    assert.match(await sendFrame(url, token, { type: 'inject', text: 'second', wake: true }), /^c-/);
    await assert.rejects(sendFrame(url, 'tt_nope', { type: 'cancel' }), (err) => ProtocolError.is(err, 'unauthorized'));
    await assert.rejects(sendFrame(url, token, { type: 'subscribe', from_seq: 0 }), (err) => ProtocolError.is(err, 'bad_frame'));

    const events = [];
    const client = new TerretClient({ url, token, auth: 'header', WebSocket, connectTimeoutMs: 60000, onEvent: (ev) => events.push(ev) });
    try {
      await client.connect();
      await until('the second inject', () => injects(events).some((e) => e.payload.text === 'second'));
      assert.deepEqual(injects(events).map((e) => [e.payload.text, e.payload.client_id?.startsWith('c-') ? 'c-' : e.payload.client_id]),
        [['over http', 'k-1'], ['second', 'c-']]);
    } finally {
      await client.close();
    }
  });
});
