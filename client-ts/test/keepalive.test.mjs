// The keepalive extension (docs/protocol.md, "Extension: keepalive") through a real
// socket: a small ws server plays the server side. The client's clock is node:test's
// mock timers, so the test decides when the interval has passed — ordered, not timed.
import assert from 'node:assert/strict';
import { mock, test } from 'node:test';
import WebSocket, { WebSocketServer } from 'ws';
import { KEEPALIVE_FRAME, TerretClient } from '../dist/index.js';
import { performance } from 'node:perf_hooks';

/** until waits, on I/O turns rather than timers (they are mocked), until check holds. */
async function until(what, check, timeoutMs) {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

/** serve starts a ws server that sends hello to each connection and records what it receives. */
async function serve() {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise((r) => wss.once('listening', r));
  const got = [];
  const peers = [];
  wss.on('connection', (ws) => {
    peers.push(ws);
    ws.on('message', (data) => got.push(data.toString()));
    ws.send(JSON.stringify({ type: 'hello', proto: 1, session_id: 'a1', last_seq: 0 }));
  });
  const url = `ws://127.0.0.1:${wss.address().port}/agents/a1/ws`;
  return { wss, got, peers, url, close: () => new Promise((r) => wss.close(r)) };
}

test('keepalive: sent exactly on an idle socket, not while traffic flows', async () => {
  const srv = await serve();
  const interval = 60_000;
  mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1_000_000 });
  const frames = [];
  const client = new TerretClient({
    url: srv.url, token: 't', auth: 'header', WebSocket, subscribe: false, keepaliveMs: interval,
    onFrame: (dir, text) => frames.push(`${dir} ${text}`),
  });
  try {
    await client.connect();
    const sent = () => frames.filter((f) => f.startsWith('out '));

    // Traffic from the server just before the interval is up moves the next look later.
    mock.timers.tick(interval - 1);
    srv.peers[0].send(JSON.stringify({ type: 'hello', proto: 1, session_id: 'a1', last_seq: 0 }));
    await until('the second frame in', () => frames.filter((f) => f.startsWith('in ')).length === 2, 10_000);
    mock.timers.tick(1); // the timer fires: the socket was busy 1 ms ago
    assert.deepEqual(sent(), [], 'a keepalive while traffic flowed');

    // A frame the client sends counts as traffic too.
    mock.timers.tick(interval - 2);
    await client.inject('hi', { wake: false });
    mock.timers.tick(2); // the look the server's frame left: busy again
    assert.equal(sent().length, 1);
    assert.match(sent()[0], /"type":"inject"/);

    // Then a whole interval of silence: exactly the keepalive, unnumbered.
    mock.timers.tick(interval);
    assert.deepEqual(sent().slice(1), [`out ${KEEPALIVE_FRAME}`]);
    await until('the keepalive at the server', () => srv.got.length === 2, 10_000);
    assert.equal(srv.got[1], '{"type":"keepalive"}');
    assert.match(srv.got[0], /"order":1}$/, 'the inject is order 1; the keepalive takes no number');

    // And again after the next interval of silence.
    mock.timers.tick(interval);
    assert.deepEqual(sent().slice(1), [`out ${KEEPALIVE_FRAME}`, `out ${KEEPALIVE_FRAME}`]);
  } finally {
    mock.timers.reset();
    client.close();
    await srv.close();
  }
});

test('keepalive: 0 turns it off', async () => {
  const srv = await serve();
  mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1_000_000 });
  const frames = [];
  const client = new TerretClient({
    url: srv.url, token: 't', auth: 'header', WebSocket, subscribe: false, keepaliveMs: 0,
    onFrame: (dir, text) => frames.push(`${dir} ${text}`),
  });
  try {
    await client.connect();
    mock.timers.tick(60 * 60_000);
    assert.deepEqual(frames.filter((f) => f.startsWith('out ')), []);
  } finally {
    mock.timers.reset();
    client.close();
    await srv.close();
  }
});
