// The log over HTTP (docs/protocol.md, "The log over HTTP"): where a WebSocket is not
// available (some corporate proxies), read an agent's log as JSON pages, long-polls or
// Server-Sent Events, with the same cursor (the seq) as the socket client.
import type { Cursor } from './cursor.js';
import { BadURLError, ConnectionError, ProtocolError } from './errors.js';
import type { Envelope, ErrorCode, HelloFrame, ReplayTruncatedFrame } from './protocol.gen.js';
import { agentIdOf } from './url.js';

/** EventsPage is one JSON page of the log. */
export interface EventsPage {
  epoch: string;
  events: Envelope[];
  /** the from_seq of the next page; the reader is at the tip once next_seq > last_seq */
  next_seq: number;
  last_seq: number;
  /** set when the replay limit, retention or the tip moved the start, as a subscribe says it */
  replay_truncated?: ReplayTruncatedFrame;
}

/** AbortSignalLike is the part of an AbortSignal the readers use. */
export interface AbortSignalLike {
  readonly aborted: boolean;
}

/** FetchResponseLike is the part of a fetch Response the readers use. */
export interface FetchResponseLike {
  readonly ok: boolean;
  readonly status: number;
  text(): Promise<string>;
  readonly body: { getReader(): { read(): Promise<{ value?: Uint8Array; done: boolean }> } } | null;
}

/** FetchLike is the fetch the readers call (globalThis.fetch by default). */
export type FetchLike = (url: string, init?: { headers?: Record<string, string>; signal?: AbortSignalLike }) => Promise<FetchResponseLike>;

const globalFetch = (): FetchLike => fetch as unknown as FetchLike;

/**
 * eventsURL returns the events path beside an agent's socket URL:
 * ws(s)://HOST/agents/ID/ws → http(s)://HOST/agents/ID/events. The raw API Gateway form
 * (?agent_id=) serves no HTTP paths and throws BadURLError.
 */
export function eventsURL(socketURL: string): string {
  const id = agentIdOf(socketURL);
  const u = new URL(socketURL);
  if (!u.pathname.endsWith(`/agents/${id}/ws`)) throw new BadURLError(`${socketURL}: the log over HTTP is served beside /agents/{agent_id}/ws, not on the raw API Gateway URL`);
  u.protocol = u.protocol === 'wss:' || u.protocol === 'https:' ? 'https:' : 'http:';
  u.pathname = u.pathname.replace(/\/ws$/, '/events');
  u.search = '';
  return u.toString();
}

/** ReadEventsOptions bound one page. */
export interface ReadEventsOptions {
  limit?: number;
  /** seconds (≤ 20) to wait for the next event when there is none at or after fromSeq */
  waitSeconds?: number;
  signal?: AbortSignalLike;
  fetch?: FetchLike;
}

/** readEvents reads one page of the log at url (eventsURL) from fromSeq; an error answer throws ProtocolError. */
export async function readEvents(url: string, token: string, fromSeq: number, opts: ReadEventsOptions = {}): Promise<EventsPage> {
  let q = `from_seq=${fromSeq}`;
  if (opts.limit) q += `&limit=${opts.limit}`;
  if (opts.waitSeconds) q += `&wait=${opts.waitSeconds}`;
  const f = opts.fetch ?? globalFetch();
  const headers = { Authorization: `Bearer ${token}`, Accept: 'application/json' };
  const r = await (opts.signal ? f(`${url}?${q}`, { headers, signal: opts.signal }) : f(`${url}?${q}`, { headers }));
  const text = await r.text();
  if (!r.ok) throw errorOf(r.status, text);
  return JSON.parse(text) as EventsPage;
}

function errorOf(status: number, body: string): Error {
  try {
    const e = JSON.parse(body) as { type?: string; code?: ErrorCode; message?: string };
    if (e.type === 'error' && e.code) return new ProtocolError(e.code, e.message ?? '');
  } catch {
    // not an error frame
  }
  return new ConnectionError(`events: status ${status}`);
}

/** LogReaderOptions configure a LogReader. */
export interface LogReaderOptions {
  /** the agent's socket URL (ws(s)://HOST/agents/ID/ws) or its events URL (http(s)://HOST/agents/ID/events) */
  url: string;
  token: string;
  /** 'sse' (Server-Sent Events, the default) or 'poll' (long-polls of up to 20 s) */
  mode?: 'sse' | 'poll';
  /** where reading resumes: the seq after the cursor's, 0 when it holds none */
  cursor?: Cursor;
  onEvent: (event: Envelope) => void | Promise<void>;
  onHello?: (hello: HelloFrame) => void;
  onTruncated?: (t: ReplayTruncatedFrame) => void;
  /**
   * the log was reset or deleted: hello's (or a page's) epoch is not the one the
   * cursor was recorded under (or the one read before). The reader forgets its
   * position and reads the new log from 0, after this call.
   */
  onEpochChanged?: (old: string, epoch: string) => void;
  /**
   * a failed read, before the reader retries (an unauthorized token stops it); a stream
   * ended by the server's `event: error` (a reset: internal) comes here as ProtocolError
   */
  onError?: (err: unknown) => void;
  retryMs?: number;
  fetch?: FetchLike;
}

/**
 * LogReader follows an agent's log over HTTP: the replay from its cursor, then the live
 * tail, with no gap and no duplicate across reconnects (Last-Event-ID, or next_seq). It
 * stores each event's seq in the cursor after onEvent returns, as TerretClient does. It
 * reads only: control frames go over the socket or POST /frames.
 */
export class LogReader {
  private readonly opts: LogReaderOptions;
  private readonly url: string;
  private readonly abort = new AbortController();
  private next = 0;
  private epoch: string | null = null;
  private stream_: AbortController | null = null; // the stream being read
  private done: Promise<void> | null = null;

  constructor(opts: LogReaderOptions) {
    this.opts = opts;
    this.url = /\/events$/.test(new URL(opts.url).pathname) ? opts.url : eventsURL(opts.url);
  }

  /** start begins reading; the promise it returns settles when the reader stops (close, or an unauthorized token). */
  start(): Promise<void> {
    this.done ??= this.run();
    return this.done;
  }

  /** close stops the reader. */
  close(): void {
    this.abort.abort();
    this.stream_?.abort();
  }

  private async run(): Promise<void> {
    const seq = await this.opts.cursor?.load();
    this.next = seq === null || seq === undefined ? 0 : seq + 1;
    this.epoch = (await this.opts.cursor?.loadEpoch?.()) ?? null;
    while (!this.abort.signal.aborted) {
      try {
        if (this.opts.mode === 'poll') await this.poll();
        else await this.stream();
      } catch (err) {
        if (this.abort.signal.aborted) return;
        this.opts.onError?.(err);
        if (err instanceof ProtocolError && (err.code === 'unauthorized' || err.code === 'bad_frame')) throw err;
        await new Promise<void>((r) => setTimeout(() => r(), this.opts.retryMs ?? 1000));
      }
    }
  }

  /**
   * newEpoch records the epoch of the log being read; it reports true when it is not the
   * one read before (the log was reset or deleted): the position is then 0.
   */
  private async newEpoch(epoch: string | undefined): Promise<boolean> {
    if (!epoch || epoch === this.epoch) return false;
    const old = this.epoch;
    this.epoch = epoch;
    await this.opts.cursor?.storeEpoch?.(epoch, old !== null);
    if (old === null) return false;
    this.next = 0;
    this.opts.onEpochChanged?.(old, epoch);
    return true;
  }

  private async deliver(ev: Envelope): Promise<void> {
    if (ev.seq < this.next) return; // already delivered
    await this.opts.onEvent(ev);
    await this.opts.cursor?.store(ev.seq);
    this.next = ev.seq + 1;
  }

  private async poll(): Promise<void> {
    for (;;) {
      const opts: ReadEventsOptions = { waitSeconds: 20, signal: this.abort.signal };
      if (this.opts.fetch) opts.fetch = this.opts.fetch;
      const p = await readEvents(this.url, this.opts.token, this.next, opts);
      if (await this.newEpoch(p.epoch)) continue; // a page of the new log: read it from 0
      if (p.replay_truncated) this.opts.onTruncated?.(p.replay_truncated);
      for (const ev of p.events) await this.deliver(ev);
      this.next = Math.max(this.next, p.next_seq);
    }
  }

  private async stream(): Promise<void> {
    const f = this.opts.fetch ?? globalFetch();
    const headers: Record<string, string> = { Authorization: `Bearer ${this.opts.token}`, Accept: 'text/event-stream' };
    const from = this.next;
    if (from > 0) headers['Last-Event-ID'] = String(from - 1);
    // Its own abort (close aborts it too): a stream opened at a position in a log that
    // is gone is left.
    const own = new AbortController();
    this.stream_ = own;
    try {
      await this.follow(f, headers, from, own);
    } finally {
      own.abort();
      if (this.stream_ === own) this.stream_ = null;
    }
  }

  private async follow(f: FetchLike, headers: Record<string, string>, from: number, own: AbortController): Promise<void> {
    if (this.abort.signal.aborted) return;
    const r = await f(`${this.url}?from_seq=${from}`, { headers, signal: own.signal });
    if (!r.ok || !r.body) throw errorOf(r.status, await r.text());
    const reader = r.body.getReader();
    const text = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return; // the server ended the stream (its 15 minutes on AWS): resume
      buf += text.decode(value, { stream: true });
      for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
        const record = buf.slice(0, i);
        buf = buf.slice(i + 2);
        let event = '';
        let data = '';
        for (const line of record.split('\n')) {
          if (line.startsWith(':')) continue;
          const k = line.indexOf(':');
          const name = k < 0 ? line : line.slice(0, k);
          const v = k < 0 ? '' : line.slice(k + 1).replace(/^ /, '');
          if (name === 'event') event = v;
          else if (name === 'data') data = data ? `${data}\n${v}` : v;
        }
        if (!data) continue;
        if (event === 'hello') {
          const hello = JSON.parse(data) as HelloFrame;
          this.opts.onHello?.(hello);
          if ((await this.newEpoch(hello.epoch)) && from > 0) return; // open the new log from 0
        } else if (event === 'error') {
          // The log was reset (internal) or deleted (unauthorized), as a socket is told.
          const e = JSON.parse(data) as { code?: ErrorCode; message?: string };
          throw new ProtocolError(e.code ?? 'internal', e.message ?? '');
        } else if (event === 'replay_truncated') this.opts.onTruncated?.(JSON.parse(data) as ReplayTruncatedFrame);
        else if (event === '') await this.deliver(JSON.parse(data) as Envelope);
      }
    }
  }
}
