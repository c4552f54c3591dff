import { splitMessage } from './batch.js';
import { MemoryCursor, type Cursor } from './cursor.js';
import { ClosedError, ConnectionError, ProtocolError, ProtocolViolationError, TerretError } from './errors.js';
import {
  PROTO, SUBPROTOCOL, SUBPROTOCOL_BEARER,
  type ClientFrame, type Envelope, type ErrorCode, type EventPayloads, type EventType, type HelloFrame, type InjectFrame, type Json,
} from './protocol.gen.js';
import { agentIdOf } from './url.js';

/** A session event: the durable envelope as the server sent it. */
export type SessionEvent = Envelope;

/** isEvent narrows a session event to a known type, typing its payload. */
export function isEvent<T extends EventType>(ev: SessionEvent, type: T): ev is Envelope<T, EventPayloads[T]> & SessionEvent {
  return ev.type === type;
}

/**
 * What the stream carries besides events, in stream order with them:
 * - replay_truncated: the server capped the replay; the events [requested, from) will
 *   not come over the socket, and the next event is from.
 * - error: an error frame that leaves the connection open (bad_frame, not_running,
 *   stale_call, unsupported, or a code newer than this client). The protocol has no
 *   request ids: it follows the frame that caused it but is not tied to it.
 * - cursor_reset: the cursor (or fromSeq) was beyond the log's tip — it belongs to
 *   another log, e.g. of a restarted in-memory `terret dev` — so the first subscription
 *   starts from 0 instead.
 * - epoch_changed: hello's epoch is not the one the position was recorded under: the
 *   session was reset, or deleted and created again. The client forgot the recorded
 *   seq and starts over from 0; drop what was built from the old log. It comes before
 *   the new log's first event.
 */
export type Notice =
  | { type: 'replay_truncated'; requested: number; from: number }
  | { type: 'error'; error: ProtocolError }
  | { type: 'cursor_reset'; from: number; lastSeq: number }
  | { type: 'epoch_changed'; old: string; epoch: string };

/** One item of the stream: an event (with its exact text) or a notice. */
export type StreamItem = { kind: 'event'; event: SessionEvent; raw: string } | ({ kind: 'notice' } & Notice);

export type ConnectionState = 'idle' | 'connecting' | 'connected' | 'reconnecting' | 'closed';

/** One change of the connection state. */
export interface Status {
  state: ConnectionState;
  /** 0 for connect()'s own attempt; n for the n-th reconnect attempt in a row. */
  attempt: number;
  /** How long the client waits before the attempt (reconnecting only). */
  delayMs?: number;
  /** Why the connection or the last attempt failed (reconnecting), or why the client stopped (closed; absent after close()). */
  error?: Error;
  /** The connection's hello (connected only). */
  hello?: HelloFrame;
}

/** The part of the WebSocket API the client uses: the browser's, Node 22's global, or the ws package's. */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: any) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: any) => void) | null;
}

/** A WebSocket constructor. The third argument is passed only in 'header' auth mode (ws's options, { headers }). */
export type WebSocketConstructor = new (url: string, protocols?: string | string[], options?: any) => WebSocketLike;

export interface ClientOptions {
  /** The agent's socket URL: ws(s)://HOST/agents/{agent_id}/ws, or wss://API/STAGE?agent_id=ID (see agentURL). */
  url: string;
  /** The agent's bearer token. */
  token?: string;
  /**
   * How the token travels. 'subprotocol' (the default, and the only form a browser can
   * use) offers "terret.v1" and "terret.bearer.<token>"; 'header' sends
   * Authorization: Bearer <token>, which needs a WebSocket that takes headers (the ws
   * package in Node).
   */
  auth?: 'subprotocol' | 'header';
  /** The WebSocket constructor (default: globalThis.WebSocket; in Node 20 pass the ws package's). */
  WebSocket?: WebSocketConstructor;
  /** Where the seq of every delivered event is recorded (default: a MemoryCursor). */
  cursor?: Cursor;
  /** The first subscription's from_seq (default: the cursor's seq + 1, or 0). */
  fromSeq?: number;
  /** Subscribe automatically once connect() has the hello (default true). */
  subscribe?: boolean;
  /**
   * Ask the server to pack consecutive events into one message (subscribe with
   * batch: true). Off by default: servers that do not support it ignore the flag, and
   * the client splits packed messages whether it asked or not.
   */
  batch?: boolean;
  /** Reconnect delays: the n-th attempt in a row waits a random time in [d/2, d], d = min(minBackoffMs·2^(n-1), maxBackoffMs). Defaults 250 and 30000. */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** How long one attempt may take to get its hello (default 15000). */
  connectTimeoutMs?: number;
  /**
   * How long a connection may go with nothing sent by the client before it sends
   * {"type":"keepalive"} (default 540000, 9 minutes: API Gateway closes a connection
   * idle for 10). Frames received do not count: a client that only receives still sends
   * one keepalive per interval. 0 turns it off. The frame is unnumbered; a server without the
   * extension answers bad_frame (a notice) and stays open. See docs/protocol.md.
   */
  keepaliveMs?: number;
  /** Receives every event in seq order, each once; awaited before the seq is recorded. A throw (or rejection) stops the client. */
  onEvent?: (event: SessionEvent, raw: string) => void | Promise<void>;
  /** Receives the notices, in stream order with the events. */
  onNotice?: (notice: Notice) => void;
  /** Receives every connection state change. */
  onStatus?: (status: Status) => void;
  /** Sees every text frame sent ('out', order included) and received ('in'), for logs and debugging. */
  onFrame?: (direction: 'in' | 'out', text: string) => void;
}

/** Thrown (as the client's error) by a client that stopped; compare with ProtocolError.is(err, 'superseded'). */
const STOPPED = new TerretError('client: closed');

type Item = { data: string } | { end: Error };

/** isKeepaliveAnswer: the gateway's answer to a keepalive, {"type":"keepalive"} (no seq). */
function isKeepaliveAnswer(data: string): boolean {
  try {
    const f = JSON.parse(data);
    return f !== null && typeof f === 'object' && f.type === 'keepalive' && !('seq' in f);
  } catch {
    return false;
  }
}

/** The keepalive extension's frame, exactly (docs/protocol.md, "Extension: keepalive"). */
export const KEEPALIVE_FRAME = '{"type":"keepalive"}';

/** DEFAULT_KEEPALIVE_MS is keepaliveMs's default: a minute inside API Gateway's 10-minute idle timeout. */
export const DEFAULT_KEEPALIVE_MS = 9 * 60 * 1000;

/** An inject sent whose event has not come: sent again after each reconnect. */
interface PendingInject {
  frame: InjectFrame;
  sent: number;
}

/** The most injects kept for a resend; past it the oldest is forgotten. */
const MAX_PENDING = 256;
/** How long an inject is kept: the server remembers a client_id for 24 hours. */
const PENDING_WINDOW_MS = 23 * 3600 * 1000;

/** newClientId returns a new random client_id ("c-" and 32 hex digits). */
export function newClientId(): string {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return 'c-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

/** Conn is one WebSocket: its frames in arrival order, and the order count of what it sent. */
class Conn {
  hello: HelloFrame | null = null;
  private order = 0;
  private items: Item[] = [];
  private waiter: (() => void) | null = null;
  private ended = false;
  /**
   * When the client last sent a frame, or connected (ms): the keepalive's idle clock.
   * Frames received do not move it: AWS does not document that the server's frames keep
   * a connection open (docs/protocol.md, "Extension: keepalive").
   */
  private sent = Date.now();
  private keepaliveTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    readonly ws: WebSocketLike,
    private readonly tap?: (direction: 'in' | 'out', text: string) => void,
    private readonly keepaliveMs = 0,
  ) {
    if (keepaliveMs > 0) this.armKeepalive(keepaliveMs);
    ws.onmessage = (m) => {
      if (typeof m.data === 'string') {
        this.tap?.('in', m.data);
        this.push({ data: m.data });
      }
      else this.push({ end: new ProtocolViolationError('client: binary frame') });
    };
    ws.onclose = (c) => this.push({ end: new ConnectionError(`connection closed (code ${c.code}${c.reason ? ': ' + c.reason : ''})`, c.code) });
    ws.onerror = () => {}; // the close that follows says it
  }

  /** armKeepalive looks again in ms: a frame sent meanwhile only moves the next look later. */
  private armKeepalive(ms: number): void {
    this.keepaliveTimer = setTimeout(() => {
      if (this.ended) return;
      const idle = Date.now() - this.sent;
      if (idle < this.keepaliveMs) return this.armKeepalive(this.keepaliveMs - idle);
      if (this.ws.readyState === 1 /* OPEN */) {
        this.ws.send(KEEPALIVE_FRAME); // unnumbered: the server's handlers never see it
        this.tap?.('out', KEEPALIVE_FRAME);
        this.sent = Date.now();
      }
      this.armKeepalive(this.keepaliveMs);
    }, ms);
  }

  push(item: Item): void {
    if (this.ended) return;
    if ('end' in item) {
      this.ended = true;
      clearTimeout(this.keepaliveTimer);
    }
    this.items.push(item);
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }

  /** next waits for the next item; a timeout ends the connection. */
  async next(timeoutMs?: number): Promise<Item> {
    while (this.items.length === 0) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.waiter = resolve;
        if (timeoutMs !== undefined) {
          timer = setTimeout(() => this.push({ end: new ConnectionError(`no hello within ${timeoutMs} ms`) }), timeoutMs);
        }
      });
      clearTimeout(timer);
    }
    return this.items.shift()!;
  }

  /** send writes one frame, numbered with the connection's next order (1, 2, 3, …). */
  send(frame: ClientFrame): void {
    if (this.ended || this.ws.readyState !== 1 /* OPEN */) {
      throw new ConnectionError(`client: send ${frame.type}: not connected`);
    }
    this.order++;
    const text = JSON.stringify({ ...frame, order: this.order });
    this.ws.send(text);
    this.sent = Date.now();
    this.tap?.('out', text);
  }

  close(code = 1000, reason = ''): void {
    this.push({ end: STOPPED });
    try {
      this.ws.close(code, reason);
    } catch {
      // already closed
    }
  }
}

/** A queue the async iterators read; ended with the client's error, or null after close(). */
class Feed<T> {
  private items: T[] = [];
  private waiter: (() => void) | null = null;
  private done = false;
  private error: Error | null = null;
  push(item: T): void {
    this.items.push(item);
    this.wake();
  }
  end(error: Error | null): void {
    this.done = true;
    this.error = error;
    this.wake();
  }
  private wake(): void {
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }
  async *iterate(onReturn: () => void): AsyncGenerator<T, void, undefined> {
    try {
      for (;;) {
        if (this.items.length > 0) {
          yield this.items.shift()!;
          continue;
        }
        if (this.done) {
          if (this.error) throw this.error;
          return;
        }
        await new Promise<void>((r) => (this.waiter = r));
      }
    } finally {
      onReturn();
    }
  }
}

/**
 * TerretClient is one agent's socket, kept open across drops. Events reach the caller
 * in seq order, each exactly once for the life of the client, whatever happens to the
 * connection: on a drop (network, close, lagged, internal, a gap in seq) it reconnects
 * with jittered exponential backoff and resubscribes from the cursor's seq + 1,
 * discarding what it already delivered. unauthorized and superseded stop it.
 *
 * ```ts
 * const c = new TerretClient({ url, token, cursor: localStorageCursor('demo') });
 * c.on('event', (ev) => console.log(ev.seq, ev.type));
 * await c.connect();           // hello, then subscribe from the cursor
 * await c.inject('hi', { wake: true });
 * ```
 */
export class TerretClient implements AsyncIterable<StreamItem> {
  readonly agentId: string;
  private readonly opts: Required<Pick<ClientOptions, 'minBackoffMs' | 'maxBackoffMs' | 'connectTimeoutMs'>> & ClientOptions;
  private readonly cursor: Cursor;
  private readonly listeners = { event: new Set<(ev: SessionEvent, raw: string) => void | Promise<void>>(), notice: new Set<(n: Notice) => void>(), status: new Set<(s: Status) => void>() };
  private readonly feeds = new Set<Feed<StreamItem>>();

  private conn: Conn | null = null;
  private dialing: Conn | null = null; // the attempt waiting for its hello
  private readyWaiters: Array<() => void> = [];
  private stopped = false;
  private started = false;
  private stopWake: (() => void) | null = null;
  private doneResolve!: (err: Error | null) => void;
  /** Resolves once the client has stopped: with why, or null after close(). Never rejects. */
  readonly done: Promise<Error | null>;
  private err: Error | null = null;
  private lastHello: HelloFrame | null = null;
  private stateNow: ConnectionState = 'idle';

  private subscribed = false;
  private next = 0; // the next seq the caller has not received
  private epoch: string | null = null; // the epoch of the log next belongs to
  private awaiting: number | null = null; // discard events until this seq (the newest subscription's first)
  private progress = false; // the current connection delivered an event
  private pendingInjects: PendingInject[] = []; // injects sent whose event has not come (exactly once)

  constructor(options: ClientOptions) {
    this.agentId = agentIdOf(options.url);
    this.opts = { minBackoffMs: 250, maxBackoffMs: 30000, connectTimeoutMs: 15000, ...options };
    if (this.opts.maxBackoffMs < this.opts.minBackoffMs) this.opts.maxBackoffMs = this.opts.minBackoffMs;
    this.cursor = options.cursor ?? new MemoryCursor();
    this.done = new Promise((r) => (this.doneResolve = r));
  }

  /** The current connection state. */
  get state(): ConnectionState {
    return this.stateNow;
  }
  /** The newest connection's hello. */
  get hello(): HelloFrame | null {
    return this.lastHello;
  }
  /**
   * What the connection's token allows, from hello: 'driver' (reads and controls the
   * agent) or 'observer' (reads the log; every control frame is answered with a
   * ProtocolError of code 'forbidden'). null before the first hello; 'driver' from a
   * server that does not name a role.
   */
  get role(): 'driver' | 'observer' | null {
    if (!this.lastHello) return null;
    return this.lastHello.role === 'observer' ? 'observer' : 'driver';
  }
  /** Why the client stopped (null while it runs, or after close()). */
  get error(): Error | null {
    return this.err;
  }
  /** The next seq the caller has not received (what a resubscribe asks for). */
  get nextSeq(): number {
    return this.next;
  }

  /** on adds a listener and returns the function that removes it. */
  on(kind: 'event', fn: (ev: SessionEvent, raw: string) => void | Promise<void>): () => void;
  on(kind: 'notice', fn: (n: Notice) => void): () => void;
  on(kind: 'status', fn: (s: Status) => void): () => void;
  on(kind: 'event' | 'notice' | 'status', fn: (...args: any[]) => any): () => void {
    const set = this.listeners[kind] as Set<typeof fn>;
    set.add(fn);
    return () => set.delete(fn);
  }

  /**
   * connect opens the socket and waits for hello, then (unless options.subscribe is
   * false) subscribes from options.fromSeq, or the cursor's seq + 1, or 0. It makes one
   * attempt and does not retry: it rejects with a ProtocolError (unauthorized), a
   * ConnectionError or a ProtocolViolationError, and the client is then stopped. After
   * it resolves the client reconnects on its own.
   */
  async connect(): Promise<HelloFrame> {
    if (this.started) throw new TerretError('client: connect called twice');
    this.started = true;
    this.status({ state: 'connecting', attempt: 0 });
    let conn: Conn;
    try {
      conn = await this.dial();
    } catch (err) {
      const e = err instanceof Fatal ? err.inner : (err as Error);
      this.finish(e);
      throw e;
    }
    if (this.stopped) {
      conn.close();
      throw new ClosedError('client: closed', { cause: this.err ?? undefined });
    }
    this.attach(conn);
    this.status({ state: 'connected', attempt: 0, hello: conn.hello! });
    let restarted = false;
    try {
      restarted = await this.checkEpoch(conn.hello!);
    } catch (err) {
      this.finish(err as Error);
      conn.close();
      throw err;
    }
    if (this.opts.subscribe !== false) {
      try {
        let from = restarted ? 0 : this.opts.fromSeq;
        if (from === undefined) {
          const seq = await this.cursor.load();
          from = seq === null ? 0 : seq + 1;
        }
        if (from > conn.hello!.last_seq + 1) {
          this.noticeNow({ type: 'cursor_reset', from, lastSeq: conn.hello!.last_seq });
          from = 0;
        }
        this.subscribe(from);
      } catch (err) {
        this.finish(err as Error);
        conn.close();
        throw err;
      }
    }
    void this.run(conn);
    return conn.hello!;
  }

  /**
   * subscribe asks for the log from fromSeq on (replay, then the live tail). Events the
   * previous subscription still had in flight are discarded: the next event is fromSeq
   * (or, after a replay_truncated notice, the seq it names). The subscription is
   * recorded before it is sent, so a reconnect re-sends it.
   */
  subscribe(fromSeq: number): void {
    if (!Number.isSafeInteger(fromSeq) || fromSeq < 0) throw new RangeError(`subscribe from ${fromSeq}: seq must be an integer ≥ 0`);
    this.throwIfStopped();
    this.subscribed = true;
    this.next = fromSeq;
    this.awaiting = fromSeq;
    if (this.conn) this.conn.send(this.subscribeFrame(fromSeq));
  }

  /**
   * The seq of the newest event delivered (-1 before the first): the usual expectSeq of
   * a frame sent in answer to what the events showed.
   */
  get seenSeq(): number {
    return this.next - 1;
  }

  /**
   * inject sends text; with wake on an idle agent it starts a turn, otherwise it steers
   * the running one. With expectSeq (the newest seq the sender saw) it applies only if
   * no turn started or ended after it; otherwise the server answers a `stale` notice and
   * nothing is logged.
   */
  inject(text: string, options: { wake?: boolean; expectSeq?: number } = {}): Promise<void> {
    return this.send(withExpect({ type: 'inject', text, wake: options.wake ?? true }, options.expectSeq));
  }
  /**
   * cancel asks the running turn to stop (a not_running notice when none runs). With
   * expectSeq it stops only the turn running at that seq, else a `stale` notice.
   */
  cancel(reason?: string, options: { expectSeq?: number } = {}): Promise<void> {
    return this.send(withExpect(reason ? { type: 'cancel', reason } : { type: 'cancel' }, options.expectSeq));
  }
  /**
   * approve resolves the parked tool call callId (the id of its tool/call). With
   * expectSeq the request must be at or before that seq, else a `stale` notice.
   */
  approve(callId: string, options: { expectSeq?: number } = {}): Promise<void> {
    return this.send(withExpect({ type: 'approve', call_id: callId }, options.expectSeq));
  }
  /** deny resolves the parked tool call callId as denied; expectSeq as for approve. */
  deny(callId: string, reason?: string, options: { expectSeq?: number } = {}): Promise<void> {
    return this.send(withExpect(reason ? { type: 'deny', call_id: callId, reason } : { type: 'deny', call_id: callId }, options.expectSeq));
  }
  /** setModel points a model role (main, titler, …) at spec ("provider/model" or "scripted"). */
  setModel(role: string, spec: string): Promise<void> {
    return this.send({ type: 'set_model', role, spec });
  }
  /**
   * setPolicy replaces the agent's tool allow list (fnmatch globs; [] allows no tool).
   * With expectSeq it applies only if no policy/updated came after that seq.
   */
  setPolicy(patterns: string[], options: { expectSeq?: number } = {}): Promise<void> {
    return this.send(withExpect({ type: 'set_policy', patterns: [...patterns] }, options.expectSeq));
  }

  /**
   * send writes one frame once connected, waiting through a reconnect. A frame is sent
   * at most once: one whose write fails is not re-sent (the server may have got it; the
   * log tells), and the promise rejects.
   */
  async send(frame: ClientFrame): Promise<void> {
    if (frame.type !== 'subscribe' && !('client_id' in frame && frame.client_id)) {
      frame = { ...frame, client_id: newClientId() };
    }
    if (frame.type === 'inject') this.keep(frame);
    for (;;) {
      this.throwIfStopped();
      if (this.conn) {
        this.conn.send(frame);
        return;
      }
      await new Promise<void>((r) => this.readyWaiters.push(r));
    }
  }

  /**
   * pending lists the client_ids of the injects sent whose event (user/message or
   * context/injected carrying the client_id) has not arrived, oldest first. After a
   * reconnect each is sent again with its client_id: the server applies a client_id
   * once, so one that landed appends nothing and one lost with the socket lands now.
   */
  get pending(): string[] {
    return this.pendingInjects.map((p) => p.frame.client_id!);
  }

  private keep(frame: InjectFrame): void {
    const now = Date.now();
    while (this.pendingInjects.length > 0 && (this.pendingInjects.length >= MAX_PENDING || now - this.pendingInjects[0]!.sent > PENDING_WINDOW_MS)) {
      this.pendingInjects.shift();
    }
    this.pendingInjects.push({ frame, sent: now });
  }

  private acknowledged(ev: SessionEvent): void {
    if (ev.type !== 'user/message' && ev.type !== 'context/injected') return;
    const id = (ev.payload as { client_id?: unknown } | null)?.client_id;
    if (typeof id !== 'string') return;
    this.pendingInjects = this.pendingInjects.filter((p) => p.frame.client_id !== id);
  }

  private resend(conn: Conn): void {
    for (const p of [...this.pendingInjects]) {
      try {
        conn.send(p.frame);
      } catch {
        return; // the connection ended: the next one sends them again
      }
    }
  }

  /**
   * reconnect drops the current connection as a network failure would: the client
   * reconnects with its backoff and resubscribes. (A page's "reconnect" button; tests.)
   */
  reconnect(): void {
    this.conn?.ws.close(4000, 'client reconnect');
  }

  /** close stops the client: it closes the connection normally and stops reconnecting. */
  async close(): Promise<void> {
    if (!this.stopped) {
      const conn = this.conn;
      if (!this.started || !conn) this.finish(null);
      else {
        this.stopped = true; // run() sees STOPPED and finishes
        conn.close(1000, 'bye');
      }
      this.dialing?.close(1000, 'bye');
      this.stopWake?.();
    }
    await this.done;
  }

  /** stream yields events and notices in stream order; it ends after close() and throws why the client stopped otherwise. */
  stream(): AsyncIterableIterator<StreamItem> {
    const feed = new Feed<StreamItem>();
    if (this.stoppedFor() !== undefined) feed.end(this.err);
    else this.feeds.add(feed);
    const it = feed.iterate(() => this.feeds.delete(feed));
    return it as AsyncIterableIterator<StreamItem>;
  }
  [Symbol.asyncIterator](): AsyncIterator<StreamItem> {
    return this.stream();
  }
  /** events yields the session events only. */
  async *events(): AsyncGenerator<SessionEvent, void, undefined> {
    for await (const item of this.stream()) if (item.kind === 'event') yield item.event;
  }

  // ---- internals ----

  private stoppedFor(): Error | null | undefined {
    return this.stopped && this.conn === null && this.stateNow === 'closed' ? this.err : undefined;
  }

  private throwIfStopped(): void {
    if (this.stopped) throw new ClosedError(this.err ? `client: closed: ${this.err.message}` : 'client: closed', { cause: this.err ?? undefined });
  }

  private subscribeFrame(from: number): ClientFrame {
    return this.opts.batch ? { type: 'subscribe', from_seq: from, batch: true } : { type: 'subscribe', from_seq: from };
  }

  private status(s: Status): void {
    this.stateNow = s.state;
    this.opts.onStatus?.(s);
    for (const fn of this.listeners.status) fn(s);
  }

  /** dial opens one connection and reads its hello. */
  private async dial(): Promise<Conn> {
    const WS = this.opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!WS) throw new TerretError('client: no WebSocket: pass options.WebSocket (in Node 20, the ws package)');
    let ws: WebSocketLike;
    if (this.opts.auth === 'header') {
      ws = new WS(this.opts.url, [], { headers: this.opts.token ? { Authorization: `Bearer ${this.opts.token}` } : {} });
    } else {
      const protocols = [SUBPROTOCOL];
      if (this.opts.token) protocols.push(SUBPROTOCOL_BEARER + this.opts.token);
      ws = new WS(this.opts.url, protocols);
    }
    const conn = new Conn(ws, this.opts.onFrame, this.opts.keepaliveMs ?? DEFAULT_KEEPALIVE_MS);
    this.dialing = conn;
    let item: Item;
    try {
      // The keepalive's answer ({"type":"keepalive"}, from the gateway itself) can come
      // before hello when a keepalive went out before hello arrived: it is not the
      // server's first frame, so it is skipped here as it is after hello.
      for (;;) {
        item = await conn.next(this.opts.connectTimeoutMs);
        if (!('data' in item) || !isKeepaliveAnswer(item.data)) break;
      }
    } finally {
      this.dialing = null;
    }
    if ('end' in item) {
      conn.close();
      throw item.end === STOPPED ? new ClosedError('client: closed') : item.end;
    }
    let f: any;
    try {
      f = JSON.parse(item.data);
    } catch {
      conn.close(1002);
      throw new ProtocolViolationError(`client: undecodable first frame`);
    }
    if (f && f.type === 'error' && typeof f.code === 'string') {
      conn.close();
      throw new ProtocolError(f.code, String(f.message ?? ''));
    }
    if (!f || f.type !== 'hello' || 'seq' in f) {
      conn.close(1002);
      throw new ProtocolViolationError(`client: first frame is ${JSON.stringify(f?.type)}, not hello`);
    }
    if (f.proto !== PROTO) {
      conn.close(1002);
      throw new Fatal(new ProtocolViolationError(`client: server speaks protocol ${f.proto}, this client ${PROTO}`));
    }
    conn.hello = f as HelloFrame;
    return conn;
  }

  private attach(conn: Conn): void {
    this.conn = conn;
    this.lastHello = conn.hello;
    this.progress = false;
    const waiters = this.readyWaiters;
    this.readyWaiters = [];
    for (const w of waiters) w();
  }

  private detach(conn: Conn): void {
    if (this.conn === conn) this.conn = null;
  }

  /** run serves connections until the client stops. */
  private async run(conn: Conn): Promise<void> {
    let attempt = 0;
    let since = Date.now();
    for (;;) {
      let cause = await this.serve(conn);
      this.detach(conn);
      conn.close(cause instanceof ProtocolViolationError ? 1002 : 1000);
      if (cause === STOPPED || this.stopped) return this.finish(null);
      const fatal = fatalOf(cause);
      if (fatal) return this.finish(fatal);
      if (this.progress || Date.now() - since >= this.opts.maxBackoffMs) attempt = 0;
      for (;;) {
        attempt++;
        const delay = this.backoff(attempt);
        this.status({ state: 'reconnecting', attempt, delayMs: delay, error: cause });
        await this.sleep(delay);
        if (this.stopped) return this.finish(null);
        this.status({ state: 'connecting', attempt });
        try {
          const c = await this.dial();
          if (this.stopped) {
            c.close();
            return this.finish(null);
          }
          await this.resubscribe(c);
          conn = c;
          this.status({ state: 'connected', attempt, hello: c.hello! });
          break;
        } catch (err) {
          if (this.stopped) return this.finish(null);
          const f = fatalOf(err as Error);
          if (f) return this.finish(f);
          cause = err as Error;
        }
      }
      since = Date.now();
    }
  }

  /** resubscribe re-sends the subscription on a new connection, from the cursor's seq + 1 but never past what the caller still lacks. */
  private async resubscribe(conn: Conn): Promise<void> {
    try {
      await this.checkEpoch(conn.hello!);
    } catch (err) {
      conn.close();
      throw new Fatal(err as Error);
    }
    if (this.subscribed) {
      let from = this.next;
      let seq: number | null;
      try {
        seq = await this.cursor.load();
      } catch (err) {
        conn.close();
        throw new Fatal(err as Error);
      }
      if (seq !== null && seq + 1 < from) from = seq + 1; // events in [from, next) come again and are discarded
      conn.send(this.subscribeFrame(from));
      this.awaiting = from;
    }
    this.resend(conn); // the injects whose event has not come, before any new frame
    this.attach(conn);
  }

  /**
   * checkEpoch compares hello's epoch with the one the position belongs to — the
   * client's own, or at first the cursor's. A change means the session was reset, or
   * deleted and created again: the recorded seqs name events of a log that is gone, so
   * the client forgets them (cursor.storeEpoch with restart), continues from seq 0 and
   * tells the application (epoch_changed) before any event of the new log. It
   * resolves to whether it started over.
   */
  private async checkEpoch(hello: HelloFrame): Promise<boolean> {
    if (!hello.epoch) return false; // a server without epochs
    let known = this.epoch;
    if (known === null && this.cursor.loadEpoch) known = (await this.cursor.loadEpoch()) ?? null;
    if (known === hello.epoch) {
      this.epoch = known;
      return false;
    }
    const restart = known !== null && known !== '';
    if (this.cursor.storeEpoch) await this.cursor.storeEpoch(hello.epoch, restart);
    this.epoch = hello.epoch;
    if (!restart) return false;
    this.next = 0;
    this.noticeNow({ type: 'epoch_changed', old: known!, epoch: hello.epoch });
    return true;
  }

  private backoff(attempt: number): number {
    const d = Math.min(this.opts.minBackoffMs * 2 ** Math.min(attempt - 1, 30), this.opts.maxBackoffMs);
    return Math.round(d / 2 + Math.random() * (d / 2));
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        resolve();
      }
      this.stopWake = () => {
        this.stopWake = null;
        done();
      };
    });
  }

  /** serve handles conn's frames until it ends, and returns why. */
  private async serve(conn: Conn): Promise<Error> {
    for (;;) {
      const item = await conn.next();
      if ('end' in item) return item.end;
      try {
        await this.handle(item.data);
      } catch (err) {
        return err as Error;
      }
    }
  }

  /** handle routes one message; a throw ends the connection. */
  private async handle(data: string): Promise<void> {
    for (const text of splitMessage(data)) {
      let f: any;
      try {
        f = JSON.parse(text);
      } catch {
        throw new ProtocolViolationError(`client: undecodable frame: ${text.slice(0, 80)}`);
      }
      if (f === null || typeof f !== 'object' || Array.isArray(f)) throw new ProtocolViolationError('client: frame is not a JSON object');
      if ('seq' in f) {
        await this.event(f as SessionEvent, text);
        continue;
      }
      switch (f.type) {
        case 'error': {
          const pe = new ProtocolError(f.code, String(f.message ?? ''));
          if (pe.closes) throw pe;
          await this.notice({ type: 'error', error: pe });
          break;
        }
        case 'replay_truncated':
          await this.truncated(Number(f.requested_from_seq), Number(f.from_seq));
          break;
        default:
          break; // a repeated hello, or a frame newer than this client
      }
    }
  }

  private async event(ev: SessionEvent, raw: string): Promise<void> {
    if (!Number.isSafeInteger(ev.seq)) throw new ProtocolViolationError(`client: event seq ${JSON.stringify(ev.seq)} is not an integer`);
    if (!this.subscribed) return;
    if (this.awaiting !== null) {
      if (ev.seq !== this.awaiting) return; // the replaced subscription's, still in flight
      this.awaiting = null;
    }
    if (ev.seq < this.next) return; // delivered already
    if (ev.seq > this.next) throw new ProtocolViolationError(`client: event seq ${ev.seq} where ${this.next} was due`);
    this.next = ev.seq + 1;
    this.progress = true;
    this.acknowledged(ev);
    try {
      await this.opts.onEvent?.(ev, raw);
      for (const fn of this.listeners.event) await fn(ev, raw);
      for (const feed of this.feeds) feed.push({ kind: 'event', event: ev, raw });
      await this.cursor.store(ev.seq);
    } catch (err) {
      throw new Fatal(err as Error);
    }
  }

  private async truncated(requested: number, from: number): Promise<void> {
    if (this.awaiting === null || requested !== this.awaiting) return; // a replaced subscription's
    this.awaiting = from;
    const missing = this.next;
    if (from <= missing) return; // the caller has everything up to from already
    this.next = from;
    await this.notice({ type: 'replay_truncated', requested: missing, from });
  }

  private async notice(n: Notice): Promise<void> {
    try {
      this.noticeNow(n);
    } catch (err) {
      throw new Fatal(err as Error);
    }
  }

  private noticeNow(n: Notice): void {
    this.opts.onNotice?.(n);
    for (const fn of this.listeners.notice) fn(n);
    for (const feed of this.feeds) feed.push({ kind: 'notice', ...n });
  }

  private finish(err: Error | null): void {
    if (this.stateNow === 'closed') return;
    this.stopped = true;
    this.err = err;
    this.conn = null;
    const waiters = this.readyWaiters;
    this.readyWaiters = [];
    for (const w of waiters) w();
    for (const feed of this.feeds) feed.end(err);
    this.feeds.clear();
    this.status(err ? { state: 'closed', attempt: 0, error: err } : { state: 'closed', attempt: 0 });
    this.doneResolve(err);
  }
}

/** Fatal wraps an error that stops the client: the caller's (callbacks, cursor) or the server's final word. */
class Fatal extends Error {
  constructor(readonly inner: Error) {
    super(inner.message);
  }
}

function fatalOf(err: Error): Error | null {
  if (err instanceof Fatal) return err.inner;
  if (ProtocolError.is(err, 'unauthorized') || ProtocolError.is(err, 'superseded')) return err;
  return null;
}

/** Json is re-exported for payload typing. */
export type { Json, ErrorCode };

/** withExpect adds the expect_seq precondition to frame when seq is given. */
function withExpect<F extends ClientFrame>(frame: F, seq: number | undefined): F {
  if (seq === undefined) return frame;
  if (!Number.isSafeInteger(seq) || seq < 0) throw new RangeError(`expect_seq ${seq}: must be an integer ≥ 0`);
  return { ...frame, expect_seq: seq };
}
