// The package against a real `terret dev` (scripted model, demo tools), in Node with the
// ws package: turns, tools, approvals, cancel, reconnects through a proxy that cuts the
// connection mid-replay and mid-tail, replay_truncated and superseded.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { ProtocolError, SessionProjection, TerretClient } from '../dist/index.js';
import { e2e, id, startDev, startProxy, until } from './dev.mjs';

const opts = { ...e2e(), concurrency: true }; // the agents are independent: run the tests at once

/** open connects a client for agent with the header auth and records what it sees. */
async function open(dev, agent, extra = {}) {
  const token = extra.token ?? (await dev.token(agent));
  const rec = { events: [], notices: [], statuses: [], view: new SessionProjection() };
  const client = new TerretClient({
    url: dev.url(agent, extra.host), token, auth: 'header', WebSocket, minBackoffMs: 20, maxBackoffMs: 200, connectTimeoutMs: 60000, ...extra.options,
    onEvent: (ev) => {
      rec.events.push(ev);
      rec.view.apply(ev);
    },
    onNotice: (n) => {
      rec.notices.push(n);
      rec.view.apply(n);
    },
    onStatus: (s) => {
      if (s.state === 'reconnecting' && rec.cutAt === undefined) rec.cutAt = rec.events.at(-1)?.seq ?? -1;
      rec.statuses.push(s);
    },
  });
  rec.hello = await client.connect();
  rec.client = client;
  rec.seqs = () => rec.events.map((e) => e.seq);
  rec.ends = () => rec.events.filter((e) => e.type === 'turn/end');
  rec.waitEnds = (n) => until(`${n} turn/end`, () => rec.ends().length >= n);
  return rec;
}

/** cutSeq is the seq of the last event delivered before the first reconnect. */
function cutSeq(rec) {
  return rec.cutAt ?? -1;
}

/** titled waits for the session/titled that follows a session's first turn and returns its seq: the log's tip. */
async function titled(rec) {
  const ev = await until('session/titled', () => rec.events.find((e) => e.type === 'session/titled'));
  return ev.seq;
}

function gapless(seqs, from = 0) {
  assert.deepEqual(seqs, seqs.map((_, i) => from + i), `seqs not ${from}..n gapless and once each: ${seqs}`);
}

describe('against terret dev --approvals', opts, () => {
  let dev;
  before(async () => {
    dev = await startDev(['--approvals']);
  });
  after(async () => {
    await dev?.stop();
  });

  test('a full turn: streamed reply, projection, cursor', async () => {
    const agent = id('turn');
    const rec = await open(dev, agent);
    assert.equal(rec.hello.session_id, agent);
    assert.equal(rec.hello.proto, 1);
    await rec.client.inject('hello from node', { wake: true });
    await rec.waitEnds(1);
    const types = rec.events.map((e) => e.type);
    assert.deepEqual(types.slice(0, 3), ['session/created', 'user/message', 'turn/start']);
    assert.ok(types.filter((t) => t === 'assistant/chunk').length >= 2, `not streamed: ${types}`);
    assert.equal(rec.ends()[0].payload.status, 'completed');
    gapless(rec.seqs());
    const assistant = rec.view.items.filter((i) => i.kind === 'assistant');
    assert.deepEqual(assistant.map((a) => [a.text, a.streaming]), [['hello from node', false]]);
    assert.deepEqual(rec.view.turn, { running: false, turnId: null, lastStatus: 'completed', lastReason: null });
    assert.equal(rec.view.items.find((i) => i.kind === 'user').text, 'hello from node');
    await rec.client.close();
    assert.equal(await rec.client.done, null);
    assert.equal(rec.statuses.at(-1).state, 'closed');
  });

  test('a tool turn with the demo tools, over the subprotocol auth', async () => {
    const agent = id('tool');
    const rec = await open(dev, agent, { options: { auth: 'subprotocol' } });
    const script = { script: [{ call: [{ tool: 'echo', args: { text: 'hi' } }, { tool: 'clock', args: {} }] }, { say: 'done' }] };
    const iter = rec.client.events();
    await rec.client.inject(JSON.stringify(script), { wake: true });
    const seen = [];
    for await (const ev of iter) { // the async iterator sees the same events
      seen.push(ev.seq);
      if (ev.type === 'turn/end') break;
    }
    await rec.waitEnds(1);
    assert.deepEqual(seen, rec.seqs().slice(0, seen.length));
    assert.equal(rec.ends()[0].payload.status, 'completed');
    const tools = rec.view.items.filter((i) => i.kind === 'tool');
    assert.deepEqual(tools.map((t) => [t.name, t.status]), [['echo', 'done'], ['clock', 'done']]);
    assert.deepEqual(tools[0].args, { text: 'hi' });
    assert.deepEqual(tools[0].result, { text: 'hi' });
    assert.equal(rec.view.items.filter((i) => i.kind === 'assistant').at(-1).text, 'done');
    gapless(rec.seqs());
    await rec.client.close();
  });

  test('an approval: guarded_echo parks, approve runs it; a second approve is stale_call', async () => {
    const agent = id('appr');
    const rec = await open(dev, agent);
    await rec.client.inject(JSON.stringify({ script: [{ call: [{ tool: 'guarded_echo', args: { text: 'ok?' } }] }, { say: 'approved it' }] }));
    await until('a pending approval', () => rec.view.pendingApprovals.length === 1);
    const [call] = rec.view.pendingApprovals;
    assert.equal(call.name, 'guarded_echo');
    assert.equal(rec.view.turn.running, true);
    await rec.client.approve(call.callId);
    await rec.waitEnds(1);
    assert.equal(rec.ends()[0].payload.status, 'completed');
    assert.equal(call.approval.state, 'approved');
    assert.equal(call.status, 'done');
    assert.deepEqual(call.result, { text: 'ok?' });
    assert.equal(rec.view.pendingApprovals.length, 0);
    await rec.client.approve(call.callId);
    await until('stale_call', () => rec.notices.some((n) => n.type === 'error' && n.error.code === 'stale_call'));
    assert.ok(ProtocolError.is(rec.notices.find((n) => n.type === 'error').error, 'stale_call'));
    assert.equal(rec.client.state, 'connected', 'a notice keeps the connection');
    await rec.client.close();
  });

  test('cancel: a parked turn is cancelled with its reason; cancel with no turn is not_running', async () => {
    const agent = id('cancel');
    const rec = await open(dev, agent);
    await rec.client.inject(JSON.stringify({ script: [{ call: [{ tool: 'guarded_echo', args: { text: 'no' } }] }, { say: 'never' }] }));
    await until('a pending approval', () => rec.view.pendingApprovals.length === 1);
    const [call] = rec.view.pendingApprovals;
    await rec.client.cancel('changed my mind');
    await rec.waitEnds(1);
    assert.deepEqual([rec.ends()[0].payload.status, rec.ends()[0].payload.reason], ['cancelled', 'changed my mind']);
    assert.equal(call.approval.state, 'denied');
    assert.equal(rec.view.turn.lastStatus, 'cancelled');
    await rec.client.cancel();
    await until('not_running', () => rec.notices.some((n) => n.type === 'error' && n.error.code === 'not_running'));
    // set_model and set_policy: a policy lands in the log; a bad model spec is bad_frame.
    await rec.client.setPolicy(['echo', 'clock']);
    await until('policy/updated', () => rec.view.policy?.length === 2);
    assert.deepEqual(rec.view.policy, ['echo', 'clock']);
    await rec.client.setModel('main', 'not a spec');
    await until('bad_frame', () => rec.notices.some((n) => n.type === 'error' && n.error.code === 'bad_frame'));
    await rec.client.setModel('main', 'scripted');
    await rec.client.inject('still here');
    await rec.waitEnds(2);
    assert.equal(rec.ends()[1].payload.status, 'completed');
    gapless(rec.seqs());
    await rec.client.close();
  });

  test('reconnect through a proxy cut mid-replay and mid-tail: gapless, no duplicate', async () => {
    const agent = id('proxy');
    const proxy = await startProxy(dev.host);
    try {
      // A log of some 30 events, 7 KB, to replay: one answer in 25 chunks.
      const writer = await open(dev, agent);
      const long = '0123456789'.repeat(25);
      await writer.client.inject(JSON.stringify({ script: [{ say: long, chunks: 25 }] }));
      await writer.waitEnds(1);
      const tip = await titled(writer);
      await writer.client.close();

      // Mid-replay: the first connection through the proxy dies after 4 KB, in the
      // middle of an event frame.
      proxy.cutAfter(3000);
      let cutAt = null;
      const rec = await open(dev, agent, { host: proxy.host, options: { maxBackoffMs: 100 } });
      await until('the replay to the tip', () => rec.events.at(-1)?.seq === tip);
      assert.ok(cutSeq(rec) > 0 && cutSeq(rec) < tip, `the cut was not mid-replay (first reconnect after seq ${cutSeq(rec)}, tip ${tip})`);
      const firstDrop = rec.statuses.findIndex((s) => s.state === 'reconnecting');
      assert.ok(firstDrop > 0, 'the cut did not make the client reconnect');
      assert.ok(proxy.connections >= 2, `${proxy.connections} connections through the proxy`);
      gapless(rec.seqs());

      // Mid-tail: a slow answer streams; after its 5th chunk arrives every connection dies.
      const dropsBefore = rec.statuses.filter((s) => s.state === 'reconnecting').length;
      const off = rec.client.on('event', (ev) => {
        if (ev.seq > tip && ev.type === 'assistant/chunk' && ev.payload.index === 4) {
          cutAt = ev.seq;
          proxy.cutAll();
        }
      });
      await rec.client.inject(JSON.stringify({ script: [{ say: 'abcdefghijklmnopqrstuvwxyz0123456789', chunks: 12, delay_ms: 30 }] }));
      await rec.waitEnds(2);
      off();
      assert.ok(cutAt !== null, 'never cut mid-tail');
      assert.ok(rec.statuses.filter((s) => s.state === 'reconnecting').length > dropsBefore, 'no reconnect after the mid-tail cut');
      gapless(rec.seqs());
      assert.equal(rec.view.items.filter((i) => i.kind === 'assistant').at(-1).text, 'abcdefghijklmnopqrstuvwxyz0123456789');
      // The resumed connection said hello again and the client is live.
      assert.equal(rec.statuses.at(-1).state, 'connected');
      assert.ok(rec.statuses.at(-1).attempt > 0);
      await rec.client.close();
    } finally {
      await proxy.close();
    }
  });

  test('superseded: the older client stops, says why, and does not reconnect', async () => {
    const agent = id('super');
    const first = await open(dev, agent);
    await until('session/created', () => first.events.length === 1);
    const second = await open(dev, agent);
    const why = await first.client.done;
    assert.ok(ProtocolError.is(why, 'superseded'), `first stopped with ${why}`);
    assert.equal(first.client.state, 'closed');
    assert.ok(!first.statuses.some((s) => s.state === 'reconnecting'), 'the superseded client reconnected');
    await assert.rejects(first.client.inject('x'), /closed: superseded/);
    // The second is the live one.
    await second.client.inject('mine now');
    await second.waitEnds(1);
    await second.client.close();
  });

  test('batched frames: a replay packs events one per line; they arrive gapless, each once', async () => {
    const agent = id('batch');
    const plain = await open(dev, agent);
    await plain.client.inject(JSON.stringify({ script: [{ say: 'packed into fewer messages', chunks: 20 }] }));
    await plain.waitEnds(1);
    const tip = plain.seqs().at(-1);
    await plain.client.close();
    // A batching client replays the same log: consecutive events share a message.
    const messages = [];
    const rec = await open(dev, agent, { options: { batch: true, onFrame: (dir, text) => dir === 'in' && messages.push(text) } });
    await until(`the replay up to seq ${tip}`, () => rec.seqs().includes(tip));
    gapless(rec.seqs());
    assert.ok(messages.some((m) => m.split('\n').length > 1), 'no message held more than one event');
    assert.ok(!messages.some((m) => m.includes('\n') && m.includes('"type":"hello"')), 'a protocol frame was packed');
    await rec.client.close();
  });

  test('unauthorized: connect rejects with a typed error', async () => {
    const agent = id('unauth');
    const client = new TerretClient({ url: dev.url(agent), token: 'tt_wrong', auth: 'header', WebSocket });
    const err = await client.connect().then(() => null, (e) => e);
    assert.ok(ProtocolError.is(err, 'unauthorized'), `got ${err}`);
    assert.equal(await client.done, err);
  });
});

describe('against terret dev --replay-limit 5', opts, () => {
  let dev;
  before(async () => {
    dev = await startDev(['--replay-limit', '5']);
  });
  after(async () => {
    await dev?.stop();
  });

  test('replay_truncated names the skipped range; the stream goes on from there', async () => {
    const agent = id('trunc');
    const writer = await open(dev, agent);
    await writer.client.inject(JSON.stringify({ script: [{ say: 'one two three four', chunks: 4 }] }));
    await writer.waitEnds(1);
    const tip = await titled(writer); // 0 created, 1 user, 2 start, 3-6 chunks, 7 end, 8 titled
    await writer.client.close();

    const rec = await open(dev, agent, { options: { fromSeq: 0 } });
    await until('the tip', () => rec.events.at(-1)?.seq === tip);
    const trunc = rec.notices.filter((n) => n.type === 'replay_truncated');
    assert.deepEqual(trunc, [{ type: 'replay_truncated', requested: 0, from: tip - 4 }]);
    gapless(rec.seqs(), tip - 4);
    assert.equal(rec.view.items[0].kind, 'note');
    assert.match(rec.view.items[0].text, new RegExp(`^Events 0–${tip - 5} are not available`));
    await rec.client.close();
  });
});
