// The client's rules against a scripted in-memory WebSocket (the server side is played
// by the test): order numbering, discard-until-from_seq, no duplicate and no gap,
// replay_truncated, lagged, superseded, backoff, batching, and the session projection.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { MemoryCursor, ProtocolError, SessionProjection, StorageCursor, TerretClient, agentURL, agentIdOf, splitMessage } from '../dist/index.js';
import { until as poll } from './dev.mjs';

// Everything here is in memory: a condition not reached in 5 s is a failure.
const until = (what, check) => poll(what, check, 5000);

/** FakeSocket is the client's side of one connection; the test speaks for the server. */
class FakeSocket {
  static all = [];
  constructor(url, protocols, options) {
    Object.assign(this, { url, protocols, options, readyState: 0, sent: [], onopen: null, onmessage: null, onclose: null, onerror: null });
    FakeSocket.all.push(this);
    queueMicrotask(() => {
      this.readyState = 1;
      this.onopen?.({});
    });
  }
  send(text) {
    this.sent.push(JSON.parse(text));
  }
  close(code = 1005, reason = '') {
    if (this.readyState === 3) return;
    this.readyState = 3;
    queueMicrotask(() => this.onclose?.({ code, reason }));
  }
  // the server's side
  recv(...frames) {
    this.onmessage({ data: frames.map((f) => (typeof f === 'string' ? f : JSON.stringify(f))).join('\n') });
  }
  hello(lastSeq = 10) {
    this.recv({ type: 'hello', proto: 1, session_id: 'a1', last_seq: lastSeq });
  }
  drop() {
    this.readyState = 3;
    this.onclose({ code: 1006, reason: '' });
  }
}

const ev = (seq, type = 'x/test', payload = {}) => ({ id: `e${seq}`, session_id: 'a1', seq, at: '2026-01-01T00:00:00.000000Z', type, payload });

/** setup makes a client over FakeSocket and connects it; got is what it delivered. */
async function setup(options = {}) {
  FakeSocket.all = [];
  const got = { seqs: [], notices: [], statuses: [] };
  const client = new TerretClient({
    url: 'ws://h/agents/a1/ws', token: 'tt_x', WebSocket: FakeSocket, minBackoffMs: 1, maxBackoffMs: 4,
    onEvent: (e) => got.seqs.push(e.seq), onNotice: (n) => got.notices.push(n), onStatus: (s) => got.statuses.push(s),
    ...options,
  });
  const connected = client.connect();
  await until('the first socket', () => FakeSocket.all.length === 1 && FakeSocket.all[0].readyState === 1);
  FakeSocket.all[0].hello(options.lastSeq ?? 10);
  await connected;
  return { client, got, sock: (i) => FakeSocket.all[i] };
}

/** nextSocket waits for reconnect attempt i, and answers its hello. */
async function nextSocket(i, lastSeq = 10) {
  await until(`socket ${i}`, () => FakeSocket.all.length > i && FakeSocket.all[i].readyState === 1);
  FakeSocket.all[i].hello(lastSeq);
  await until(`socket ${i} subscribed`, () => FakeSocket.all[i].sent.length > 0);
  return FakeSocket.all[i];
}

describe('client', () => {
  test('subprotocol auth offers terret.v1 and the bearer token; header auth sends Authorization', async () => {
    const { client, sock } = await setup();
    assert.deepEqual(sock(0).protocols, ['terret.v1', 'terret.bearer.tt_x']);
    await client.close();
    const h = await setup({ auth: 'header' });
    assert.deepEqual([h.sock(0).protocols, h.sock(0).options], [[], { headers: { Authorization: 'Bearer tt_x' } }]);
    await h.client.close();
  });

  test('every frame carries order 1, 2, 3, … per connection, from 1 again after a reconnect', async () => {
    const { client, sock } = await setup();
    await client.inject('a');
    await client.cancel('why');
    await client.approve('c1');
    // Every control frame carries a new client_id (exactly-once frames).
    const ids = (sent) => sent.map((f) => f.client_id);
    const bare = (sent) => sent.map(({ client_id, ...f }) => f);
    const first = ids(sock(0).sent);
    assert.equal(first[0], undefined);
    for (const id of first.slice(1)) assert.match(id, /^c-[0-9a-f]{32}$/);
    assert.equal(new Set(first.slice(1)).size, 3);
    assert.deepEqual(bare(sock(0).sent), [
      { type: 'subscribe', from_seq: 0, order: 1 },
      { type: 'inject', text: 'a', wake: true, order: 2 },
      { type: 'cancel', reason: 'why', order: 3 },
      { type: 'approve', call_id: 'c1', order: 4 },
    ]);
    sock(0).drop();
    const s1 = await nextSocket(1);
    await client.deny('c1', 'no');
    await client.setModel('main', 'scripted');
    await client.setPolicy(['echo']);
    // The inject, whose event never came, is sent again first with its client_id.
    assert.equal(s1.sent[1].client_id, first[1]);
    assert.deepEqual(client.pending, [first[1]]);
    assert.deepEqual(bare(s1.sent), [
      { type: 'subscribe', from_seq: 0, order: 1 },
      { type: 'inject', text: 'a', wake: true, order: 2 },
      { type: 'deny', call_id: 'c1', reason: 'no', order: 3 },
      { type: 'set_model', role: 'main', spec: 'scripted', order: 4 },
      { type: 'set_policy', patterns: ['echo'], order: 5 },
    ]);
    await client.close();
  });

  test('expectSeq sends expect_seq on inject, cancel, approve, deny and set_policy; seenSeq is the newest seq delivered', async () => {
    const { client, got, sock } = await setup();
    assert.equal(client.seenSeq, -1);
    sock(0).recv(ev(0), ev(1));
    await until('0..1', () => got.seqs.length === 2);
    assert.equal(client.seenSeq, 1);
    await client.inject('a', { wake: false, expectSeq: 1 });
    await client.cancel(undefined, { expectSeq: 1 });
    await client.approve('c1', { expectSeq: 0 });
    await client.deny('c1', 'no', { expectSeq: 1 });
    await client.setPolicy(['echo'], { expectSeq: 1 });
    const sent = sock(0).sent.slice(1);
    for (const f of sent) assert.equal(typeof f.client_id, 'string', `a client_id on ${f.type}`);
    assert.deepEqual(sent.map(({ client_id, ...f }) => f), [
      { type: 'inject', text: 'a', wake: false, expect_seq: 1, order: 2 },
      { type: 'cancel', expect_seq: 1, order: 3 },
      { type: 'approve', call_id: 'c1', expect_seq: 0, order: 4 },
      { type: 'deny', call_id: 'c1', reason: 'no', expect_seq: 1, order: 5 },
      { type: 'set_policy', patterns: ['echo'], expect_seq: 1, order: 6 },
    ]);
    assert.throws(() => client.cancel(undefined, { expectSeq: -1 }), RangeError);
    await client.close();
  });

  test('after a resubscribe events are discarded until seq == from_seq; none twice, none skipped', async () => {
    const { client, got, sock } = await setup();
    sock(0).recv(ev(0), ev(1), ev(2));
    await until('0..2', () => got.seqs.length === 3);
    client.subscribe(1);
    sock(0).recv(ev(3), ev(4)); // the replaced subscription's, in flight
    sock(0).recv(ev(1), ev(2), ev(3), ev(4)); // the new replay
    await until('1..4 again', () => got.seqs.length === 7);
    assert.deepEqual(got.seqs, [0, 1, 2, 1, 2, 3, 4]);
    assert.deepEqual(sock(0).sent.at(-1), { type: 'subscribe', from_seq: 1, order: 2 });
    await client.close();
  });

  test('a gap in seq reconnects and resubscribes from the first missing seq', async () => {
    const { client, got, sock } = await setup();
    sock(0).recv(ev(0), ev(1), ev(3));
    const s1 = await nextSocket(1);
    assert.deepEqual(s1.sent[0], { type: 'subscribe', from_seq: 2, order: 1 });
    s1.recv(ev(2), ev(3));
    await until('3', () => got.seqs.at(-1) === 3);
    assert.deepEqual(got.seqs, [0, 1, 2, 3]);
    await client.close();
  });

  test('lagged reconnects from the cursor: a lagging cursor means a replay the client de-duplicates', async () => {
    // A cursor that stores only every other seq lags behind what was delivered.
    const lazy = { seq: null, load() { return this.seq; }, store(s) { if (s % 2 === 0) this.seq = s; } };
    const { client, got, sock } = await setup({ cursor: lazy });
    sock(0).recv(ev(0), ev(1), ev(2), ev(3));
    await until('0..3', () => got.seqs.length === 4);
    sock(0).recv({ type: 'error', code: 'lagged', message: 'too slow' });
    const s1 = await nextSocket(1);
    assert.deepEqual(s1.sent[0], { type: 'subscribe', from_seq: 3, order: 1 }); // cursor 2 + 1
    s1.recv(ev(3), ev(4));
    await until('4', () => got.seqs.at(-1) === 4);
    assert.deepEqual(got.seqs, [0, 1, 2, 3, 4]);
    const drop = got.statuses.find((s) => s.state === 'reconnecting');
    assert.ok(ProtocolError.is(drop.error, 'lagged'), String(drop.error));
    await client.close();
  });

  for (const code of ['superseded', 'unauthorized']) {
    test(`${code} stops the client, says why, and never reconnects`, async () => {
      const { client, got, sock } = await setup();
      sock(0).recv({ type: 'error', code, message: 'bye' });
      const why = await client.done;
      assert.ok(ProtocolError.is(why, code), String(why));
      assert.equal(why.closes, true);
      assert.equal(FakeSocket.all.length, 1, 'a new socket was opened');
      assert.deepEqual(got.statuses.map((s) => s.state), ['connecting', 'connected', 'closed']);
      await assert.rejects(client.inject('x'), (e) => e.name === 'ClosedError' && e.cause === why);
    });
  }

  test('notice codes keep the connection; an unknown code too', async () => {
    const { client, got, sock } = await setup();
    sock(0).recv({ type: 'error', code: 'not_running', message: 'no turn' }, { type: 'error', code: 'from_the_future', message: '?' });
    await until('two notices', () => got.notices.length === 2);
    assert.equal(got.notices[0].error.code, 'not_running');
    assert.equal(client.state, 'connected');
    await client.close();
  });

  test('replay_truncated names the skipped range and moves the expected seq', async () => {
    const { client, got, sock } = await setup();
    sock(0).recv({ type: 'replay_truncated', requested_from_seq: 0, from_seq: 5 }, ev(5), ev(6));
    await until('5, 6', () => got.seqs.length === 2);
    assert.deepEqual(got.notices, [{ type: 'replay_truncated', requested: 0, from: 5 }]);
    assert.deepEqual(got.seqs, [5, 6]);
    await client.close();
  });

  test('a cursor beyond the log tip starts over from 0, and says so', async () => {
    FakeSocket.all = [];
    const { client, got, sock } = await setup({ cursor: new MemoryCursor(41), lastSeq: 3 });
    assert.deepEqual(got.notices, [{ type: 'cursor_reset', from: 42, lastSeq: 3 }]);
    assert.deepEqual(sock(0).sent[0], { type: 'subscribe', from_seq: 0, order: 1 });
    await client.close();
  });

  test('backoff: jittered, doubling, capped', async () => {
    const { client, got, sock } = await setup({ minBackoffMs: 2, maxBackoffMs: 8, connectTimeoutMs: 60000 });
    sock(0).drop();
    for (let i = 1; i <= 5; i++) {
      await until(`attempt ${i}`, () => FakeSocket.all.length > i && FakeSocket.all[i].readyState === 1);
      FakeSocket.all[i].drop(); // refused before hello: counts up
    }
    await until('5 delays', () => got.statuses.filter((s) => s.state === 'reconnecting').length >= 6);
    const delays = got.statuses.filter((s) => s.state === 'reconnecting').map((s) => [s.attempt, s.delayMs]);
    for (const [attempt, delay] of delays) {
      const d = Math.min(2 * 2 ** (attempt - 1), 8);
      assert.ok(delay >= d / 2 && delay <= d, `attempt ${attempt}: delay ${delay} not in [${d / 2}, ${d}]`);
    }
    assert.deepEqual(delays.map(([a]) => a), [1, 2, 3, 4, 5, 6]);
    await client.close();
  });

  test('batch: subscribe opts in; packed messages are split, one event per line', async () => {
    const { client, got, sock } = await setup({ batch: true });
    assert.deepEqual(sock(0).sent[0], { type: 'subscribe', from_seq: 0, batch: true, order: 1 });
    sock(0).recv(ev(0), ev(1), ev(2)); // recv joins the frames with "\n": one packed message
    await until('0..2', () => got.seqs.length === 3);
    assert.deepEqual(got.seqs, [0, 1, 2]);
    await client.close();
  });

  test('async iterators: stream() has events and notices in order and ends after close()', async () => {
    const { client, sock } = await setup();
    const items = [];
    const done = (async () => {
      for await (const item of client) items.push(item.kind === 'event' ? item.event.seq : item.type);
    })();
    sock(0).recv(ev(0), { type: 'error', code: 'bad_frame', message: 'x' }, ev(1));
    await until('3 items', () => items.length === 3);
    await client.close();
    await done;
    assert.deepEqual(items, [0, 'error', 1]);
  });

  test('a throwing onEvent stops the client without recording the seq', async () => {
    const cursor = new MemoryCursor();
    const { client, sock } = await setup({ cursor, onEvent: (e) => { if (e.seq === 1) throw new Error('boom'); } });
    sock(0).recv(ev(0), ev(1));
    const why = await client.done;
    assert.equal(why.message, 'boom');
    assert.equal(cursor.load(), 0);
  });
});

describe('splitMessage', () => {
  const cases = [
    ['one frame', '{"a":1}', ['{"a":1}']],
    ['two lines', '{"a":1}\n{"b":2}', ['{"a":1}', '{"b":2}']],
    ['trailing newline and CRLF', '{"a":1}\r\n{"b":2}\n', ['{"a":1}', '{"b":2}']],
    ['newline and braces inside strings', '{"t":"x}\\n{\\"y"}\n{"u":"\\\\"}', ['{"t":"x}\\n{\\"y"}', '{"u":"\\\\"}']],
    ['nested objects and arrays', '{"a":{"b":[1,{"c":"]"}]}}\n{"d":[]}', ['{"a":{"b":[1,{"c":"]"}]}}', '{"d":[]}']],
    ['a raw newline in a payload', '{"a":\n1}\n{"b":2}', ['{"a":\n1}', '{"b":2}']],
    ['garbage is left for JSON.parse', '{"a":1}\nnope', ['{"a":1}', 'nope']],
    ['an unterminated object', '{"a":1}\n{"b":', ['{"a":1}', '{"b":']],
    ['empty', '', []],
  ];
  for (const [name, input, want] of cases) {
    test(name, () => assert.deepEqual(splitMessage(input), want));
  }
});

describe('cursors and URLs', () => {
  test('StorageCursor keeps a seq; garbage reads as nothing', () => {
    const m = new Map();
    const storage = { getItem: (k) => m.get(k) ?? null, setItem: (k, v) => m.set(k, v) };
    const c = new StorageCursor('k', storage);
    assert.equal(c.load(), null);
    c.store(12);
    assert.equal(c.load(), 12);
    m.set('k', '12abc');
    assert.equal(c.load(), null);
  });
  test('agentURL and agentIdOf', () => {
    assert.equal(agentURL('ws://127.0.0.1:3001', 'a1'), 'ws://127.0.0.1:3001/agents/a1/ws');
    assert.equal(agentURL('http://h:1/', 'a1'), 'ws://h:1/agents/a1/ws');
    assert.equal(agentURL('ws://h/agents/{agent_id}/ws', 'a1'), 'ws://h/agents/a1/ws');
    assert.equal(agentURL('wss://abc.execute-api.us-east-1.amazonaws.com/prod', 'a1'), 'wss://abc.execute-api.us-east-1.amazonaws.com/prod?agent_id=a1');
    assert.equal(agentIdOf('wss://abc.execute-api.us-east-1.amazonaws.com/prod?agent_id=a1'), 'a1');
    assert.throws(() => agentURL('ws://h', 'a/b'), { name: 'BadURLError' });
    assert.throws(() => agentIdOf('ws://h/'), { name: 'BadURLError' });
    assert.throws(() => new TerretClient({ url: 'ftp://h/agents/a/ws' }), { name: 'BadURLError' });
  });
});

describe('SessionProjection', () => {
  test('folds a turn with a streamed answer, a tool call and an approval', () => {
    const v = new SessionProjection();
    const apply = (...evs) => evs.forEach((e) => v.apply(e));
    apply(ev(0, 'session/created'), ev(1, 'user/message', { text: 'hi' }), ev(2, 'turn/start', { turn_id: 't1' }),
      ev(3, 'assistant/chunk', { text: 'Hel', index: 0 }));
    assert.equal(v.streaming.text, 'Hel');
    assert.equal(v.turn.running, true);
    apply(ev(4, 'assistant/chunk', { text: 'lo', index: 1, final: true }));
    assert.equal(v.streaming, null);
    assert.deepEqual(v.items.filter((i) => i.kind === 'assistant').map((a) => [a.text, a.streaming]), [['Hello', false]]);
    apply(ev(5, 'tool/call', { id: 'c1', name: 'guarded_echo', args: { text: 'x' } }),
      ev(6, 'approval/requested', { call_id: 'c1', name: 'guarded_echo', args: { text: 'x' } }));
    assert.deepEqual(v.pendingApprovals.map((c) => c.callId), ['c1']);
    const changed = v.apply(ev(7, 'approval/resolved', { call_id: 'c1', verdict: 'approved' }));
    assert.equal(changed[0].approval.state, 'approved');
    apply(ev(8, 'tool/result', { call_id: 'c1', result: { text: 'x' } }), ev(9, 'tool/call', { id: 'c2', name: 'guarded_echo', args: {} }),
      ev(10, 'approval/requested', { call_id: 'c2', name: 'guarded_echo', args: {} }));
    const tool = v.items.find((i) => i.kind === 'tool' && i.callId === 'c1');
    assert.deepEqual([tool.status, tool.result], ['done', { text: 'x' }]);
    apply(ev(11, 'turn/end', { turn_id: 't1', status: 'cancelled', reason: 'stop' }));
    assert.deepEqual(v.turn, { running: false, turnId: null, lastStatus: 'cancelled', lastReason: 'stop' });
    assert.equal(v.pendingApprovals.length, 0);
    assert.equal(v.items.find((i) => i.kind === 'tool' && i.callId === 'c2').approval.state, 'settled');
    v.apply({ type: 'replay_truncated', requested: 12, from: 20 });
    assert.match(v.items.at(-1).text, /^Events 12–19 are not available/);
  });

  test('shows context/compacted as a marker and keeps the items before it', () => {
    const v = new SessionProjection();
    [ev(0, 'session/created'), ev(1, 'user/message', { text: 'hi' }), ev(2, 'context/compacted', { through_seq: 1, summary: 'the user said hi' })].forEach((e) => v.apply(e));
    const marker = v.items.at(-1);
    assert.deepEqual([marker.kind, marker.source, marker.seq], ['note', 'context/compacted', 2]);
    assert.equal(marker.text, 'Earlier context summarised through seq 1');
    assert.equal(v.items.filter((i) => i.kind === 'user').length, 1);
  });
});
