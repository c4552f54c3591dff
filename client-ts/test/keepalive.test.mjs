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

test('keepalive: counts only what the client sends; frames received do not delay it', async () => {
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

    // A frame from the server just before the interval is up changes nothing: the client
    // sent nothing for the interval, so the keepalive goes out on time (a client that
    // only receives — tail on a busy agent — must still send).
    mock.timers.tick(interval - 1);
    srv.peers[0].send(JSON.stringify({ type: 'hello', proto: 1, session_id: 'a1', last_seq: 0 }));
    await until('the second frame in', () => frames.filter((f) => f.startsWith('in ')).length === 2, 10_000);
    mock.timers.tick(1);
    assert.deepEqual(sent(), [`out ${KEEPALIVE_FRAME}`], 'no keepalive: received frames delayed it');

    // A frame the client sends restarts the clock: the look after it finds it 2 ms old.
    mock.timers.tick(interval - 2);
    await client.inject('hi', { wake: false });
    mock.timers.tick(2);
    assert.equal(sent().length, 2);
    assert.match(sent()[1], /"type":"inject"/);

    // An interval after the inject: exactly the keepalive, unnumbered.
    mock.timers.tick(interval - 2);
    assert.deepEqual(sent().slice(2), [`out ${KEEPALIVE_FRAME}`]);
    await until('the keepalives at the server', () => srv.got.length === 3, 10_000);
    assert.deepEqual([srv.got[0], srv.got[2]], [KEEPALIVE_FRAME, KEEPALIVE_FRAME]);
    assert.match(srv.got[1], /"order":1}$/, 'the inject is order 1; the keepalives take no number');

    // And again after the next interval of silence.
    mock.timers.tick(interval);
    assert.deepEqual(sent().slice(2), [`out ${KEEPALIVE_FRAME}`, `out ${KEEPALIVE_FRAME}`]);
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
