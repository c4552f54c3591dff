import type { Notice, SessionEvent, StreamItem } from './client.js';
import type { EventPayloads, Json, TurnStatus, Verdict } from './protocol.gen.js';

/** What a chat UI shows, one item per thing on screen. Items are mutated in place as later events arrive. */
export type ChatItem = UserItem | AssistantItem | ToolItem | TurnItem | NoteItem;

interface ItemBase {
  /** A stable key for the UI (1, 2, 3, … in creation order). */
  key: number;
  /** The seq of the event that created the item (null for notices). */
  seq: number | null;
}

/** A user/message (steer false) or context/injected (steer true). */
export interface UserItem extends ItemBase {
  kind: 'user';
  text: string;
  steer: boolean;
  truncated: boolean;
}

/** One model answer; its text grows chunk by chunk while streaming is true. */
export interface AssistantItem extends ItemBase {
  kind: 'assistant';
  text: string;
  streaming: boolean;
}

/** The approval state of a tool call: pending while the request stands. */
export interface ApprovalState {
  state: 'pending' | Verdict | 'settled';
  /** The deny reason, or why a pending request was settled (its turn ended). */
  reason?: string;
  /** The seq of approval/requested. */
  seq: number;
}

/** A tool call with its result, and its approval when it needed one. */
export interface ToolItem extends ItemBase {
  kind: 'tool';
  callId: string;
  name: string;
  args: Json;
  status: 'called' | 'done' | 'failed';
  result?: Json;
  error?: string;
  approval?: ApprovalState;
}

/** The start or the end of a turn. */
export interface TurnItem extends ItemBase {
  kind: 'turn';
  phase: 'start' | 'end';
  turnId: string;
  status?: TurnStatus;
  reason?: string;
}

/** Everything else worth a line: session created, policy, title, truncation, unknown event types. */
export interface NoteItem extends ItemBase {
  kind: 'note';
  level: 'info' | 'warn';
  text: string;
  /** The event type, or the notice type, behind the note. */
  source: string;
}

/** The turn as a chat UI shows it. */
export interface TurnState {
  running: boolean;
  turnId: string | null;
  /** The status and reason of the newest turn/end. */
  lastStatus: TurnStatus | null;
  lastReason: string | null;
}

/**
 * SessionProjection folds a session's events (and the client's notices) into what a
 * chat UI shows: the messages, the assistant text being streamed, the tool calls with
 * their results, the approvals still pending and the turn's status. apply returns the
 * items it created or changed, so a UI can redraw just those.
 */
export class SessionProjection {
  readonly items: ChatItem[] = [];
  /** The answer being streamed, or null. */
  streaming: AssistantItem | null = null;
  turn: TurnState = { running: false, turnId: null, lastStatus: null, lastReason: null };
  title: string | null = null;
  policy: string[] | null = null;
  /** The seq of the newest event applied. */
  lastSeq: number | null = null;
  /** The tool calls of the open turn, by call id. */
  private readonly calls = new Map<string, ToolItem>();
  private keys = 0;

  /** The tool calls waiting for approve or deny. */
  get pendingApprovals(): ToolItem[] {
    return [...this.calls.values()].filter((c) => c.approval?.state === 'pending');
  }

  /** apply folds one stream item, session event or notice in, and returns the items it touched. */
  apply(item: StreamItem | SessionEvent | Notice): ChatItem[] {
    if ('kind' in item) return item.kind === 'event' ? this.event(item.event) : this.notice(item);
    if ('seq' in item) return this.event(item as SessionEvent);
    return this.notice(item as Notice);
  }

  private add<T extends ChatItem>(item: Omit<T, 'key'>): T {
    const full = { ...item, key: ++this.keys } as T;
    this.items.push(full);
    return full;
  }

  private endStream(): ChatItem[] {
    const s = this.streaming;
    if (!s) return [];
    s.streaming = false;
    this.streaming = null;
    return [s];
  }

  private call(callId: string, seq: number, name = '', args: Json = {}): { item: ToolItem; created: boolean } {
    const have = this.calls.get(callId);
    if (have) return { item: have, created: false };
    const item = this.add<ToolItem>({ kind: 'tool', seq, callId, name, args, status: 'called' });
    this.calls.set(callId, item);
    return { item, created: true };
  }

  private note(seq: number | null, source: string, text: string, level: 'info' | 'warn' = 'info'): ChatItem[] {
    return [this.add<NoteItem>({ kind: 'note', seq, source, text, level })];
  }

  private notice(n: Notice): ChatItem[] {
    switch (n.type) {
      case 'replay_truncated':
        return [...this.endStream(), ...this.note(null, n.type, `Events ${n.requested}–${n.from - 1} are not available over the socket; showing from ${n.from}.`, 'warn')];
      case 'cursor_reset':
        return this.note(null, n.type, `Seq ${n.from - 1} is beyond this session's last seq ${n.lastSeq}: replaying from 0.`, 'warn');
      case 'epoch_changed':
        return [...this.endStream(), ...this.note(null, n.type, 'The session was reset: its log starts over from seq 0.', 'warn')];
      case 'error':
        return [];
    }
  }

  private event(ev: SessionEvent): ChatItem[] {
    this.lastSeq = ev.seq;
    const p = (ev.payload ?? {}) as Record<string, any>;
    const seq = ev.seq;
    switch (ev.type) {
      case 'session/created':
        return this.note(seq, ev.type, 'Session created.');
      case 'user/message':
      case 'context/injected': {
        const q = p as EventPayloads['user/message'];
        return [...this.endStream(), this.add<UserItem>({ kind: 'user', seq, text: String(q.text ?? ''), steer: ev.type === 'context/injected', truncated: q.truncated === true })];
      }
      case 'turn/start': {
        const q = p as EventPayloads['turn/start'];
        this.calls.clear();
        this.turn = { ...this.turn, running: true, turnId: String(q.turn_id ?? '') };
        return [this.add<TurnItem>({ kind: 'turn', seq, phase: 'start', turnId: this.turn.turnId! })];
      }
      case 'assistant/chunk': {
        const q = p as EventPayloads['assistant/chunk'];
        const out: ChatItem[] = [];
        if (this.streaming === null || q.index === 0) {
          out.push(...this.endStream());
          this.streaming = this.add<AssistantItem>({ kind: 'assistant', seq, text: '', streaming: true });
        }
        const s = this.streaming;
        s.text += String(q.text ?? '');
        out.push(s);
        if (q.final) this.endStream();
        return out;
      }
      case 'tool/call': {
        const q = p as EventPayloads['tool/call'];
        const out = this.endStream();
        const { item } = this.call(String(q.id), seq, String(q.name ?? ''), q.args ?? {});
        return [...out, item];
      }
      case 'tool/result': {
        const q = p as EventPayloads['tool/result'];
        const { item } = this.call(String(q.call_id), seq);
        if (q.error !== undefined) {
          item.status = 'failed';
          item.error = String(q.error);
        } else {
          item.status = 'done';
          item.result = q.result ?? null;
        }
        return [item];
      }
      case 'approval/requested': {
        const q = p as EventPayloads['approval/requested'];
        const out = this.endStream();
        const { item } = this.call(String(q.call_id), seq, String(q.name ?? ''), q.args ?? {});
        if (!item.name) item.name = String(q.name ?? '');
        item.approval = { state: 'pending', seq };
        return [...out, item];
      }
      case 'approval/resolved': {
        const q = p as EventPayloads['approval/resolved'];
        const item = this.calls.get(String(q.call_id));
        const verdict: Verdict = q.verdict === 'approved' ? 'approved' : 'denied';
        if (!item) return this.note(seq, ev.type, `Call ${q.call_id} ${verdict}${q.reason ? ': ' + q.reason : '.'}`);
        item.approval = { state: verdict, seq: item.approval?.seq ?? seq, ...(q.reason ? { reason: String(q.reason) } : {}) };
        return [item];
      }
      case 'turn/end': {
        const q = p as EventPayloads['turn/end'];
        const out = this.endStream();
        // A request stands only within its turn.
        for (const c of this.calls.values()) {
          if (c.approval?.state === 'pending') {
            c.approval = { ...c.approval, state: 'settled', reason: 'the turn ended' };
            out.push(c);
          }
        }
        this.calls.clear();
        const status = String(q.status ?? '') as TurnStatus;
        this.turn = { running: false, turnId: null, lastStatus: status, lastReason: q.reason ?? null };
        out.push(this.add<TurnItem>({ kind: 'turn', seq, phase: 'end', turnId: String(q.turn_id ?? ''), status, ...(q.reason ? { reason: String(q.reason) } : {}) }));
        return out;
      }
      case 'policy/updated': {
        const q = p as EventPayloads['policy/updated'];
        this.policy = Array.isArray(q.patterns) ? q.patterns.map(String) : [];
        return this.note(seq, ev.type, `Tool policy: ${this.policy.length ? this.policy.join(' ') : '(no tool allowed)'}`);
      }
      case 'context/compacted': {
        // A marker: the model's context was summarised up to through_seq; the log (and
        // this projection) still holds every event.
        const q = p as EventPayloads['context/compacted'];
        return this.note(seq, ev.type, `Earlier context summarised through seq ${Number(q.through_seq ?? 0)}`);
      }
      case 'session/titled':
        this.title = String((p as EventPayloads['session/titled']).title ?? '');
        return this.note(seq, ev.type, `Titled: ${this.title}`);
      default:
        return this.note(seq, ev.type, `${ev.type}`);
    }
  }
}
