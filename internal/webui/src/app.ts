// The terret dev page, built on @terret/client: pick an agent (recent ones are
// remembered), connect with a token (the client offers it as the subprotocol
// "terret.bearer.<token>", since browsers cannot set Authorization on a WebSocket),
// chat, approve or deny parked calls, set the model and the tool policy, and watch
// the session log event by event with each event's raw JSON. Event data is only ever
// written with textContent, never parsed as HTML. An event the page cannot render (an
// unknown type, a payload that is not an object) is shown raw, and never stops it. A
// socket on which the page sent nothing for 9 minutes gets {"type":"keepalive"} before
// API Gateway's 10-minute idle timeout.
//
// Built into ../static/app.js by client-ts (npm run build:page); the Go binary embeds
// the built file, so `go build` needs no npm.
import {
  ProtocolError, SessionProjection, StorageCursor, TerretClient, agentURL,
  type ChatItem, type Notice, type SessionEvent, type Status, type ToolItem,
} from '@terret/client';

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const ui = {
  status: $('status'), error: $('error'), title: $('title'),
  connectForm: $<HTMLFormElement>('connect-form'), server: $<HTMLInputElement>('server'), agent: $<HTMLInputElement>('agent'),
  recent: $('recent'), token: $<HTMLInputElement>('token'), devToken: $<HTMLButtonElement>('dev-token'),
  fromSeq: $<HTMLInputElement>('from-seq'), connect: $<HTMLButtonElement>('connect'), disconnect: $<HTMLButtonElement>('disconnect'),
  reconnect: $<HTMLButtonElement>('reconnect'),
  chat: $('chat'), log: $('log'),
  sendForm: $<HTMLFormElement>('send-form'), message: $<HTMLTextAreaElement>('message'), wake: $<HTMLInputElement>('wake'),
  send: $<HTMLButtonElement>('send'), cancel: $<HTMLButtonElement>('cancel'),
  modelForm: $<HTMLFormElement>('model-form'), role: $<HTMLInputElement>('role'), spec: $<HTMLInputElement>('spec'),
  policyForm: $<HTMLFormElement>('policy-form'), patterns: $<HTMLInputElement>('patterns'), policyNow: $('policy-now'),
};

const LOG_ROWS = 1000; // event log rows kept on the page
const RECENT_AGENTS = 8;

// API Gateway closes a WebSocket after 10 minutes idle; the client sends
// {"type":"keepalive"} once the page has sent nothing for 9 (a MOCK route on AWS: no
// invocation, one message), however much it received: AWS does not document that the
// server's frames count (docs/protocol.md, "Extension: keepalive"). ?keepalive_ms=N in
// the page's URL shortens the interval, for tests.
const KEEPALIVE_MS = (() => {
  const n = Number.parseInt(new URLSearchParams(location.search).get('keepalive_ms') ?? '', 10);
  return Number.isSafeInteger(n) && n > 0 ? n : 9 * 60 * 1000;
})();

// The event types the projection renders in the chat; others get a raw row there.
const KNOWN_TYPES = new Set(['session/created', 'user/message', 'context/injected', 'turn/start', 'assistant/chunk',
  'tool/call', 'tool/result', 'approval/requested', 'approval/resolved', 'policy/updated', 'turn/end', 'session/titled']);

let client: TerretClient | null = null;
let view = new SessionProjection();
// The seq of the newest event shown: the expect_seq of what the page's buttons send,
// so a steer, a cancel or a verdict applies to what the person saw or answers stale.
let shownSeq = -1;
const STALE_TEXT = 'The agent moved on — look again.';
const rendered = new Map<number, HTMLLIElement>(); // chat item key → its row

// ---- storage ----

function recall(key: string): string | null {
  try {
    return localStorage.getItem(key);
  } catch {
    return null;
  }
}
function remember(key: string, value: string): void {
  try {
    localStorage.setItem(key, value);
  } catch {
    // storage off: nothing is remembered
  }
}
const seqKey = (url: string) => 'terret.last_seq.' + url;
function recentAgents(): string[] {
  try {
    const v = JSON.parse(recall('terret.recent_agents') ?? '[]');
    return Array.isArray(v) ? v.filter((a) => typeof a === 'string').slice(0, RECENT_AGENTS) : [];
  } catch {
    return [];
  }
}
function addRecent(agent: string): void {
  remember('terret.recent_agents', JSON.stringify([agent, ...recentAgents().filter((a) => a !== agent)].slice(0, RECENT_AGENTS)));
  remember('terret.agent', agent);
  renderRecent();
}

// ---- DOM helpers ----

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
// A list follows its newest item until the user scrolls up, and again once they scroll
// back to the bottom. Whether it follows is decided by the user's scrolling, not at
// each append: an item that grows after it was added (a streamed answer, a tool call
// that becomes an approval) would otherwise leave the list short of its end.
const following = new Map<HTMLElement, boolean>();
const atEnd = (list: HTMLElement) => list.scrollHeight - list.scrollTop - list.clientHeight <= 2;
function follow(list: HTMLElement): void {
  following.set(list, true);
  list.addEventListener('scroll', () => following.set(list, atEnd(list)), { passive: true });
}
/** settle scrolls a following list to its very end. */
function settle(list: HTMLElement): void {
  if (following.get(list) !== false) list.scrollTop = list.scrollHeight;
}
function append(list: HTMLElement, item: HTMLElement): void {
  list.append(item);
  settle(list);
}
const json = (v: unknown) => {
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
};
const clip = (s: string, n: number) => (s.length > n ? s.slice(0, n) + '…' : s);

function setStatus(text: string, state: string): void {
  ui.status.textContent = text;
  ui.status.dataset.state = state;
}
function showError(text: string): void {
  ui.error.textContent = text;
  ui.error.hidden = false;
}
function clearError(): void {
  ui.error.textContent = '';
  ui.error.hidden = true;
}
/** readOnly: the connection's token is an observer's — the page shows the agent and sends nothing. */
function readOnly(): boolean {
  return client !== null && client.role === 'observer';
}
function refreshButtons(): void {
  const live = client !== null && client.state === 'connected';
  const control = live && !readOnly();
  ui.reconnect.disabled = !live;
  for (const b of [ui.send, ui.cancel]) b.disabled = !control;
  for (const f of [ui.modelForm, ui.policyForm]) for (const b of f.querySelectorAll('button')) b.disabled = !control;
  // An observer's view takes no input that would become a control frame: Enter in the
  // message would submit the form even with its button disabled.
  for (const i of [ui.message, ui.wake, ui.role, ui.spec, ui.patterns]) i.disabled = readOnly();
  document.body.dataset.role = readOnly() ? 'observer' : 'driver';
  for (const b of ui.chat.querySelectorAll<HTMLButtonElement>('.actions button')) if (readOnly()) b.disabled = true;
  ui.disconnect.disabled = client === null || client.state === 'closed';
}

// ---- the event log: a summary per event, its raw JSON on demand ----

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function summary(ev: SessionEvent): string {
  if (!isObject(ev.payload)) return 'payload ' + json(ev.payload);
  const p = ev.payload;
  switch (ev.type) {
    case 'user/message':
    case 'context/injected':
    case 'assistant/chunk':
      return String(p.text ?? '');
    case 'tool/call':
      return `${p.name}(${json(p.args ?? {})})`;
    case 'tool/result':
      return 'error' in p ? `✗ ${p.error}` : `→ ${json(p.result)}`;
    case 'approval/requested':
      return `${p.name}(${json(p.args ?? {})}) needs a decision`;
    case 'approval/resolved':
      return `${p.verdict}${p.reason ? ': ' + p.reason : ''}`;
    case 'turn/end':
      return `${p.status}${p.reason ? ': ' + p.reason : ''}`;
    case 'policy/updated':
      return json(p.patterns);
    case 'session/titled':
      return String(p.title ?? '');
    case 'context/compacted':
      return `through seq ${p.through_seq}: ${p.summary ?? ''}`;
    default:
      return Object.keys(p).length ? json(p) : '';
  }
}

function logRow(cls: string, seq: string, type: string, detail: string, raw?: string): void {
  const li = el('li', cls);
  li.append(el('span', 'seq', seq), el('span', 'type', type));
  if (detail) li.append(el('span', 'detail', clip(detail, 300)));
  if (raw !== undefined) {
    const d = el('details', 'raw');
    d.append(el('summary', undefined, 'JSON'), el('pre', undefined, prettyJSON(raw)));
    li.append(d);
  }
  append(ui.log, li);
  while (ui.log.childElementCount > LOG_ROWS) ui.log.firstElementChild!.remove();
}
function prettyJSON(raw: string): string {
  try {
    return JSON.stringify(JSON.parse(raw), null, 2);
  } catch {
    return raw;
  }
}

// ---- the chat: the projection's items, each one row, redrawn when it changes ----

function renderItem(item: ChatItem): void {
  let li = rendered.get(item.key);
  const fresh = !li;
  if (!li) {
    li = el('li');
    rendered.set(item.key, li);
  }
  li.replaceChildren();
  delete li.dataset.final;
  if (item.seq !== null) li.dataset.seq = String(item.seq);
  switch (item.kind) {
    case 'user':
      li.className = 'msg ' + (item.steer ? 'injected' : 'user');
      li.append(el('span', 'who', item.steer ? 'You (steer)' : 'You'), el('p', 'text', item.text + (item.truncated ? ' [truncated]' : '')));
      break;
    case 'assistant':
      li.className = 'msg assistant' + (item.streaming ? ' streaming' : '');
      if (!item.streaming) li.dataset.final = 'true';
      li.append(el('span', 'who', 'Agent'), el('p', 'text', item.text));
      break;
    case 'tool':
      renderTool(li, item);
      break;
    case 'turn':
      if (item.phase === 'start') {
        li.className = 'note turn';
        li.textContent = 'Turn started.';
      } else {
        li.className = 'note turn end';
        li.dataset.status = String(item.status);
        li.textContent = `Turn ended: ${item.status}` + (item.reason ? ` — ${item.reason}` : '');
      }
      break;
    case 'note':
      li.className = 'note ' + item.level + ' ' + item.source.replace(/[^a-z_]/g, '-');
      li.textContent = item.text;
      break;
  }
  if (fresh) append(ui.chat, li);
  else settle(ui.chat);
  // A decision is waiting: its buttons are on screen, whatever the scrolling.
  if (item.kind === 'tool' && item.approval?.state === 'pending') li.scrollIntoView({ block: 'nearest' });
}

/** rawRow puts an event the chat cannot render in it as it came: type, seq and JSON. */
function rawRow(ev: SessionEvent, raw: string, why: string): void {
  const li = el('li', 'note raw');
  li.dataset.seq = String(ev.seq);
  li.append(el('span', 'who', `${ev.type} (seq ${ev.seq}, ${why})`), el('pre', undefined, clip(prettyJSON(raw), 2000)));
  append(ui.chat, li);
}

/** compactedRow marks where the agent's context was summarised; the summary opens on click. */
function compactedRow(ev: SessionEvent, p: Record<string, unknown>): void {
  const li = el('li', 'note compacted');
  li.dataset.seq = String(ev.seq);
  li.dataset.throughSeq = String(p.through_seq);
  const d = el('details');
  d.append(el('summary', undefined, `Earlier context summarised through seq ${p.through_seq}`), el('p', 'text', String(p.summary ?? '')));
  li.append(d);
  append(ui.chat, li);
}

function renderTool(li: HTMLLIElement, t: ToolItem): void {
  li.className = 'msg tool' + (t.approval ? ' approval' : '');
  li.dataset.callId = t.callId;
  const desc = el('p', 'text', `${t.name}(${json(t.args)})`);
  desc.id = 'call-' + t.key;
  li.append(el('span', 'who', t.approval ? 'Approval needed' : 'Tool call'), desc);
  if (t.approval) {
    const a = t.approval;
    if (a.state === 'pending') {
      const actions = el('div', 'actions');
      const approve = el('button', 'approve', 'Approve');
      const deny = el('button', 'deny', 'Deny');
      for (const b of [approve, deny]) {
        b.type = 'button';
        b.setAttribute('aria-describedby', desc.id);
      }
      if (readOnly()) approve.disabled = deny.disabled = true; // an observer decides nothing
      // The buttons act on what the person sees: the request is at or before shownSeq.
      approve.addEventListener('click', () => verdict(li, actions, () => client!.approve(t.callId, { expectSeq: shownSeq })));
      deny.addEventListener('click', () => verdict(li, actions, () => client!.deny(t.callId, undefined, { expectSeq: shownSeq })));
      actions.append(approve, deny);
      li.append(actions);
    } else {
      const text = a.state === 'approved' ? 'Approved.' : a.state === 'denied' ? 'Denied' + (a.reason ? ': ' + a.reason : '.') : 'Settled: the turn ended.';
      li.append(el('p', 'verdict', text));
    }
  }
  if (t.status !== 'called') {
    const text = t.status === 'failed' ? 'error: ' + t.error : 'result: ' + json(t.result);
    li.append(el('p', 'result' + (t.status === 'failed' ? ' failed' : ''), text));
  }
}

function verdict(li: HTMLLIElement, actions: HTMLElement, send: () => Promise<void>): void {
  if (readOnly()) return; // an observer decides nothing
  clearError();
  li.dataset.pending = 'true';
  for (const b of actions.querySelectorAll('button')) b.disabled = true;
  send().catch((err: Error) => {
    showError(err.message);
    delete li.dataset.pending;
    for (const b of actions.querySelectorAll('button')) b.disabled = false;
  });
}

function applyToView(x: SessionEvent | Notice): void {
  for (const item of view.apply(x)) renderItem(item);
  ui.title.textContent = view.title ? '— ' + view.title : '';
  ui.policyNow.textContent = view.policy === null ? 'default' : view.policy.length ? view.policy.join(' ') : '(no tool allowed)';
}

// ---- the client ----

function onStatus(c: TerretClient, s: Status): void {
  if (c !== client) return;
  const agent = c.agentId;
  switch (s.state) {
    case 'connecting':
      setStatus(s.attempt ? `Reconnecting to ${agent} (attempt ${s.attempt})…` : `Connecting to ${agent}…`, s.attempt ? 'reconnecting' : 'connecting');
      break;
    case 'connected':
      setStatus(`Connected to session ${s.hello!.session_id} (last seq ${s.hello!.last_seq}).` + (s.attempt ? ' Reconnected.' : '') +
        (s.hello!.role === 'observer' ? ' Read-only: observer token.' : ''), 'connected');
      break;
    case 'reconnecting':
      setStatus(`Connection lost (${s.error?.message ?? 'closed'}). Reconnecting in ${((s.delayMs ?? 0) / 1000).toFixed(1)} s (attempt ${s.attempt})…`, 'reconnecting');
      logRow('proto warn', '—', 'connection lost', s.error?.message ?? '');
      break;
    case 'closed':
      if (s.error instanceof ProtocolError && (s.error.code === 'superseded' || s.error.code === 'unauthorized')) {
        setStatus(`Stopped: ${s.error.code}. Not reconnecting.`, 'stopped');
        showError(explainEnd(s.error.code, agent));
      } else if (s.error) {
        setStatus(`Stopped: ${s.error.message}`, 'stopped');
        showError(s.error.message);
      } else {
        setStatus('Disconnected.', 'idle');
      }
      break;
  }
  refreshButtons();
}

// explainEnd says what a final close means and what to do, as terret chat and tail do.
function explainEnd(code: 'superseded' | 'unauthorized', agent: string): string {
  if (code === 'superseded' && readOnly()) {
    return `Superseded: more observers than the server allows are watching agent ${agent}, and this was the oldest. ` +
      'Close another read-only view, then press Connect.';
  }
  if (code === 'superseded') {
    return `Superseded: another client connected to agent ${agent}. An agent has one connection at a time and the newest wins: ` +
      'terret chat, terret tail and this page on one agent take it from each other. ' +
      'Close the other client (or use another agent id), then press Connect.';
  }
  return `Unauthorized: the token for agent ${agent} is missing, invalid, rotated, revoked or expired. ` +
    `Get a new one (Dev token, or terret token create --agent ${agent}), then press Connect.`;
}

function onNotice(c: TerretClient, n: Notice): void {
  if (c !== client) return;
  switch (n.type) {
    case 'error':
      logRow('proto error', '—', 'error', n.error.message);
      // A server without the keepalive route refuses the frame and stays open: nothing
      // for the user to act on.
      if (n.error.code === 'bad_frame' && n.error.message.includes('keepalive')) break;
      showError(n.error.message);
      if (n.error.code === 'stale') {
        // A frame sent for what the page showed: the agent had moved on meanwhile.
        showError(STALE_TEXT + ' (' + n.error.message + ')');
        for (const li of ui.chat.querySelectorAll<HTMLLIElement>('li.approval[data-pending="true"]')) {
          delete li.dataset.pending;
          for (const b of li.querySelectorAll<HTMLButtonElement>('.actions button')) b.disabled = false;
        }
      }
      if (n.error.code === 'stale_call') {
        // The verdict we sent named no standing request: it is settled already.
        for (const li of ui.chat.querySelectorAll<HTMLLIElement>('li.approval[data-pending="true"]')) {
          delete li.dataset.pending;
          li.querySelector('.actions')?.remove();
          li.append(el('p', 'verdict', 'Not standing any more.'));
        }
      }
      break;
    case 'replay_truncated':
      logRow('proto warn truncated', '—', 'replay_truncated', `events ${n.requested}–${n.from - 1} skipped; replay starts at ${n.from}`);
      break;
    case 'cursor_reset':
      logRow('proto warn', '—', 'cursor reset', `seq ${n.from - 1} is beyond the log's last seq ${n.lastSeq}`);
      break;
  }
  applyToView(n);
}

/** onEvent never throws: a throw would stop the client (and the page) on one odd event. */
function onEvent(c: TerretClient, ev: SessionEvent, raw: string): void {
  if (c !== client) return;
  try {
    logRow('event', String(ev.seq), ev.type, summary(ev), raw);
  } catch {
    logRow('event', String(ev.seq), String(ev.type), '', raw);
  }
  ui.fromSeq.value = String(ev.seq + 1);
  shownSeq = ev.seq;
  try {
    if (!isObject(ev.payload)) rawRow(ev, raw, 'payload not an object');
    else if (ev.type === 'context/compacted') compactedRow(ev, ev.payload);
    else {
      if (!KNOWN_TYPES.has(ev.type)) rawRow(ev, raw, 'not known to this page');
      applyToView(ev);
    }
  } catch (err) {
    rawRow(ev, raw, 'not rendered: ' + (err as Error).message);
  }
}

function resetView(): void {
  ui.chat.replaceChildren();
  ui.log.replaceChildren();
  ui.title.textContent = '';
  ui.policyNow.textContent = 'default';
  rendered.clear();
  following.set(ui.chat, true);
  following.set(ui.log, true);
  view = new SessionProjection();
  shownSeq = -1;
}

async function connect(): Promise<void> {
  clearError();
  const agent = ui.agent.value.trim();
  if (!ui.agent.checkValidity() || agent === '') {
    showError('The agent id is 1–128 of A–Z a–z 0–9 . _ -');
    ui.agent.focus();
    return;
  }
  let url: string;
  try {
    url = agentURL(ui.server.value.trim(), agent);
  } catch (err) {
    showError((err as Error).message);
    return;
  }
  const old = client;
  client = null;
  await old?.close();
  resetView();
  addRecent(agent);
  remember('terret.server', ui.server.value.trim());
  const from = Number.parseInt(ui.fromSeq.value, 10);
  const c: TerretClient = new TerretClient({
    url,
    token: ui.token.value.trim(),
    cursor: new StorageCursor(seqKey(url), safeStorage()),
    fromSeq: Number.isSafeInteger(from) && from >= 0 ? from : 0,
    batch: true, // consecutive events packed into one message (docs/protocol.md)
    minBackoffMs: 250,
    maxBackoffMs: 10000,
    keepaliveMs: KEEPALIVE_MS,
    onEvent: (ev, raw) => onEvent(c, ev, raw),
    onNotice: (n) => onNotice(c, n),
    onStatus: (s) => onStatus(c, s),
  });
  client = c;
  refreshButtons();
  try {
    await c.connect();
  } catch (err) {
    if (c === client) showError((err as Error).message);
  }
  refreshButtons();
}

/** safeStorage is localStorage, or a memory stand-in where storage is off. */
function safeStorage(): { getItem(k: string): string | null; setItem(k: string, v: string): void } {
  try {
    localStorage.getItem('terret.probe');
    return localStorage;
  } catch {
    const m = new Map<string, string>();
    return { getItem: (k) => m.get(k) ?? null, setItem: (k, v) => void m.set(k, v) };
  }
}

// The page key that /dev/token asks for. terret dev prints the page's address with it
// in the fragment (#key=…), which no request carries; the page keeps it in this tab's
// sessionStorage (a reload keeps it) and takes it off the address bar.
const pageKeyName = 'terret.dev.key';
let pageKey: string | null = null;

function takePageKey(): void {
  const m = /^#key=([0-9a-f]{32})$/.exec(location.hash);
  if (m) {
    pageKey = m[1];
    try {
      sessionStorage.setItem(pageKeyName, pageKey);
    } catch {
      // no storage: the key lives as long as this page
    }
    history.replaceState(null, '', location.pathname + location.search);
    return;
  }
  try {
    pageKey = sessionStorage.getItem(pageKeyName);
  } catch {
    pageKey = null;
  }
}

async function devToken(): Promise<void> {
  clearError();
  if (!pageKey) {
    showError('Dev tokens need the page key: open the page at the address terret dev printed (…/#key=…).');
    return;
  }
  const agent = ui.agent.value.trim();
  if (!ui.agent.checkValidity() || agent === '') {
    showError('Enter an agent id first.');
    ui.agent.focus();
    return;
  }
  ui.devToken.disabled = true;
  try {
    // The header carries the page key; it also makes a cross-site request need a
    // preflight, which is refused.
    const r = await fetch('dev/token?agent=' + encodeURIComponent(agent), { method: 'GET', headers: { 'X-Terret-Dev': pageKey }, cache: 'no-store' });
    if (r.status === 404) throw new Error('dev tokens are served only by terret dev');
    if (r.status === 403) throw new Error('dev token refused: open the page at the address this terret dev printed (…/#key=…); a restart draws a new key');
    if (!r.ok) throw new Error(`dev token: ${r.status} ${(await r.text()).trim()}`);
    ui.token.value = (await r.json()).token;
    if (ui.status.dataset.state !== 'connected') setStatus(`Dev token created for ${agent}.`, 'idle');
  } catch (err) {
    showError((err as Error).message);
  } finally {
    ui.devToken.disabled = false;
  }
}

function fromStored(): void {
  const agent = ui.agent.value.trim();
  let seq: number | null = null;
  try {
    seq = agent ? new StorageCursor(seqKey(agentURL(ui.server.value.trim(), agent)), safeStorage()).load() : null;
  } catch {
    seq = null;
  }
  ui.fromSeq.value = String(seq === null ? 0 : seq + 1);
}

function renderRecent(): void {
  ui.recent.replaceChildren();
  for (const a of recentAgents()) {
    const b = el('button', 'recent-agent', a);
    b.type = 'button';
    b.title = `Pick agent ${a}`;
    b.addEventListener('click', () => {
      ui.agent.value = a;
      fromStored();
      ui.agent.focus();
    });
    ui.recent.append(b);
  }
  ui.recent.hidden = ui.recent.childElementCount === 0;
}

function act(p: () => Promise<void>): void {
  clearError();
  if (!client) {
    showError('Not connected.');
    return;
  }
  if (readOnly()) return; // an observer sends no control frame
  p().catch((err: Error) => showError(err.message));
}

// ---- wiring ----

// A share link opens a read-only view: #agent=ID&observe=TOKEN, TOKEN an observer token
// (terret token create --agent ID --role observer). The page takes it off the address
// bar, fills the form and connects; the token never reaches a server but the socket's.
function takeShareLink(): boolean {
  if (!location.hash.startsWith('#agent=')) return false;
  const p = new URLSearchParams(location.hash.slice(1));
  const agent = p.get('agent') ?? '';
  const token = p.get('observe') ?? '';
  history.replaceState(null, '', location.pathname + location.search);
  if (!/^[A-Za-z0-9._-]{1,128}$/.test(agent) || token === '') return false;
  remember('terret.agent', agent);
  ui.token.value = token;
  return true;
}

const shared = takeShareLink();
takePageKey();
ui.server.value = recall('terret.server') ?? (location.host ? (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host : 'ws://127.0.0.1:3001');
ui.agent.value = recall('terret.agent') ?? '';
follow(ui.chat);
follow(ui.log);
renderRecent();
fromStored();

ui.agent.addEventListener('input', fromStored);
ui.server.addEventListener('input', fromStored);
ui.connectForm.addEventListener('submit', (ev) => {
  ev.preventDefault();
  void connect();
});
ui.disconnect.addEventListener('click', () => {
  void client?.close();
});
ui.reconnect.addEventListener('click', () => client?.reconnect());
ui.devToken.addEventListener('click', () => void devToken());
ui.sendForm.addEventListener('submit', (ev) => {
  ev.preventDefault();
  const text = ui.message.value;
  if (text.trim() === '') return;
  act(async () => {
    // A steer (a turn on screen) lands in that turn or not at all.
    await client!.inject(text, view.turn.running ? { wake: ui.wake.checked, expectSeq: shownSeq } : { wake: ui.wake.checked });
    ui.message.value = '';
  });
});
ui.message.addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    ui.sendForm.requestSubmit();
  }
});
ui.cancel.addEventListener('click', () => act(() => client!.cancel(undefined, shownSeq >= 0 ? { expectSeq: shownSeq } : {})));
ui.modelForm.addEventListener('submit', (ev) => {
  ev.preventDefault();
  act(() => client!.setModel(ui.role.value.trim(), ui.spec.value.trim()));
});
ui.policyForm.addEventListener('submit', (ev) => {
  ev.preventDefault();
  const patterns = ui.patterns.value.split(/[\s,]+/).filter((p) => p !== '');
  act(() => client!.setPolicy(patterns));
});
refreshButtons();
if (shared) void connect();
