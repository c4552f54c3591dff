// The terret dev page: one WebSocket per agent, speaking the Terret Socket Protocol v1.
// Browsers cannot set Authorization on a WebSocket, so the token rides as the
// subprotocol "terret.bearer.<token>" next to "terret.v1". Event data is only ever
// written with textContent, never parsed as HTML.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const ui = {
    status: $('status'), error: $('error'), title: $('title'),
    connectForm: $('connect-form'), server: $('server'), agent: $('agent'), token: $('token'),
    devToken: $('dev-token'), fromSeq: $('from-seq'), connect: $('connect'), disconnect: $('disconnect'),
    chat: $('chat'), log: $('log'),
    sendForm: $('send-form'), message: $('message'), wake: $('wake'), send: $('send'), cancel: $('cancel'),
  };

  const LOG_ROWS = 1000; // event log rows kept on the page
  const PAYLOAD_CHARS = 400; // payload text shown per log row
  const BACKOFF_MIN_MS = 500;
  const BACKOFF_MAX_MS = 15000;
  // Error codes after which the server will refuse us again: reconnecting would loop.
  const FINAL_CODES = new Set(['unauthorized', 'superseded']);

  const state = {
    ws: null, // the current socket; events of an older one are ignored
    ready: false, // hello received on ws
    wanted: false, // the user asked for a connection: reconnect after a drop
    agent: '', url: '', token: '',
    attempt: 0, timer: 0,
    next: 0, // the seq the next event must carry
    awaiting: null, // after a subscribe: discard events until this seq arrives
    reply: null, // chat item of the assistant answer being streamed
    calls: new Map(), // call id → chat item, within the open turn
    standing: new Map(), // call id → approval chat item still awaiting a verdict
  };

  // ---- storage: the highest seq seen, per server and agent ----

  const seqKey = (url) => 'terret.last_seq.' + url;
  function storedSeq(url) {
    try {
      const v = localStorage.getItem(seqKey(url));
      return v === null ? null : Number.parseInt(v, 10);
    } catch {
      return null;
    }
  }
  function storeSeq(url, seq) {
    try { localStorage.setItem(seqKey(url), String(seq)); } catch { /* storage off: resume from 0 */ }
  }
  function remember(key, value) {
    try { localStorage.setItem(key, value); } catch { /* optional */ }
  }
  function recall(key) {
    try { return localStorage.getItem(key); } catch { return null; }
  }

  // ---- small DOM helpers ----

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function stuckToBottom(list) {
    return list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  }
  function appendTo(list, item) {
    const stick = stuckToBottom(list);
    list.append(item);
    if (stick) list.scrollTop = list.scrollHeight;
    return item;
  }
  function json(v) {
    try { return JSON.stringify(v); } catch { return String(v); }
  }
  function clip(s, n) {
    return s.length > n ? s.slice(0, n) + '…' : s;
  }

  function setStatus(text, kind) {
    ui.status.textContent = text;
    ui.status.dataset.state = kind;
  }
  function showError(text) {
    ui.error.textContent = text;
    ui.error.hidden = false;
  }
  function clearError() {
    ui.error.textContent = '';
    ui.error.hidden = true;
  }
  function refreshButtons() {
    const live = state.ws !== null && state.ready;
    ui.send.disabled = !live;
    ui.cancel.disabled = !live;
    ui.disconnect.disabled = !state.wanted && state.ws === null;
  }

  // ---- the event log ----

  function logRow(seq, type, detail, cls) {
    const li = el('li', cls);
    li.append(el('span', 'seq', seq), el('span', 'type', type));
    if (detail) li.append(el('code', 'detail', clip(detail, PAYLOAD_CHARS)));
    appendTo(ui.log, li);
    while (ui.log.childElementCount > LOG_ROWS) ui.log.firstElementChild.remove();
  }

  // ---- the chat view ----

  function chatItem(cls, who, text) {
    const li = el('li', 'msg ' + cls);
    if (who) li.append(el('span', 'who', who));
    li.append(el('p', 'text', text));
    return appendTo(ui.chat, li);
  }
  function note(text, cls) {
    return appendTo(ui.chat, el('li', 'note ' + (cls || ''), text));
  }
  function settle(item, text) {
    item.querySelector('.actions')?.remove();
    item.append(el('p', 'verdict', text));
  }

  function render(e) {
    const p = e.payload && typeof e.payload === 'object' ? e.payload : {};
    const item = (li) => { li.dataset.seq = String(e.seq); return li; };
    switch (e.type) {
      case 'session/created':
        item(note('Session created.'));
        break;
      case 'session/titled':
        ui.title.textContent = '— ' + String(p.title ?? '');
        break;
      case 'user/message':
        state.reply = null;
        item(chatItem('user', 'You', String(p.text ?? '') + (p.truncated ? ' [truncated]' : '')));
        break;
      case 'context/injected':
        state.reply = null;
        item(chatItem('injected', 'You (injected)', String(p.text ?? '') + (p.truncated ? ' [truncated]' : '')));
        break;
      case 'turn/start':
        state.calls.clear();
        item(note('Turn started.', 'turn'));
        break;
      case 'assistant/chunk': {
        if (state.reply === null || p.index === 0) {
          state.reply = item(chatItem('assistant', 'Agent', ''));
        }
        state.reply.querySelector('.text').textContent += String(p.text ?? '');
        if (p.final) {
          state.reply.dataset.final = 'true';
          state.reply = null;
        }
        break;
      }
      case 'tool/call': {
        state.reply = null;
        const li = item(chatItem('tool', 'Tool call', `${p.name}(${json(p.args ?? {})})`));
        if (typeof p.id === 'string') state.calls.set(p.id, li);
        break;
      }
      case 'tool/result': {
        const text = 'error' in p ? 'error: ' + String(p.error) : 'result: ' + json(p.result);
        const call = state.calls.get(p.call_id);
        if (call) {
          call.append(item(el('p', 'result' + ('error' in p ? ' failed' : ''), text)));
        } else {
          item(chatItem('tool', 'Tool result', text));
        }
        break;
      }
      case 'approval/requested':
        state.reply = null;
        state.standing.set(p.call_id, approvalItem(e, p));
        break;
      case 'approval/resolved': {
        const li = state.standing.get(p.call_id);
        const text = p.verdict === 'approved' ? 'Approved.' : 'Denied' + (p.reason ? ': ' + String(p.reason) : '.');
        if (li) {
          state.standing.delete(p.call_id);
          settle(li, text);
        } else {
          item(note(`${text} (call ${p.call_id})`));
        }
        break;
      }
      case 'policy/updated':
        item(note('Tool policy: ' + json(p.patterns ?? [])));
        break;
      case 'turn/end': {
        state.reply = null;
        state.calls.clear();
        // A request is standing only within its turn.
        for (const li of state.standing.values()) settle(li, 'Settled: the turn ended.');
        state.standing.clear();
        const li = item(note(`Turn ended: ${p.status}` + (p.reason ? ` — ${p.reason}` : ''), 'turn end'));
        li.dataset.status = String(p.status);
        break;
      }
      default:
        break; // new event types appear in the log only
    }
  }

  function approvalItem(e, p) {
    const li = chatItem('approval', 'Approval needed', `${p.name}(${json(p.args ?? {})})`);
    li.dataset.seq = String(e.seq);
    li.dataset.callId = String(p.call_id);
    const desc = li.querySelector('.text');
    desc.id = 'approval-' + e.seq;
    const actions = el('div', 'actions');
    const approve = el('button', 'approve', 'Approve');
    const deny = el('button', 'deny', 'Deny');
    for (const b of [approve, deny]) {
      b.type = 'button';
      b.setAttribute('aria-describedby', desc.id);
    }
    approve.addEventListener('click', () => verdict(li, 'approve', p.call_id, actions));
    deny.addEventListener('click', () => verdict(li, 'deny', p.call_id, actions));
    actions.append(approve, deny);
    li.append(actions);
    return li;
  }

  function verdict(li, type, callID, actions) {
    if (!send({ type, call_id: callID })) return;
    li.dataset.pending = 'true';
    for (const b of actions.querySelectorAll('button')) b.disabled = true;
  }

  // ---- the socket ----

  function send(frame) {
    if (state.ws === null || state.ws.readyState !== WebSocket.OPEN) {
      showError('Not connected.');
      return false;
    }
    const text = JSON.stringify(frame);
    state.ws.send(text);
    logRow('→', frame.type, text, 'out');
    return true;
  }

  function resetView() {
    ui.chat.replaceChildren();
    ui.log.replaceChildren();
    ui.title.textContent = '';
    state.reply = null;
    state.calls.clear();
    state.standing.clear();
  }

  function open() {
    clearTimeout(state.timer);
    state.timer = 0;
    const protocols = ['terret.v1'];
    if (state.token) protocols.push('terret.bearer.' + state.token);
    let ws;
    try {
      ws = new WebSocket(state.url, protocols);
    } catch (err) {
      state.wanted = false;
      setStatus('Cannot connect.', 'error');
      showError(String(err.message || err));
      refreshButtons();
      return;
    }
    state.ws = ws;
    state.ready = false;
    setStatus(`Connecting to ${state.agent}…`, 'connecting');
    ws.addEventListener('open', () => {
      if (ws === state.ws) setStatus(`Connected to ${state.agent}; waiting for hello…`, 'connecting');
    });
    ws.addEventListener('message', (m) => { if (ws === state.ws) onFrame(m.data); });
    ws.addEventListener('close', (c) => { if (ws === state.ws) onClose(c); });
    refreshButtons();
  }

  function onClose(c) {
    state.ws = null;
    state.ready = false;
    logRow('—', 'closed', `code ${c.code}${c.reason ? ': ' + c.reason : ''}`, 'proto');
    if (state.wanted) {
      state.attempt++;
      const cap = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** (state.attempt - 1));
      const delay = Math.round(cap / 2 + Math.random() * cap / 2); // jitter keeps a herd apart
      setStatus(`Connection lost (code ${c.code}). Reconnecting in ${(delay / 1000).toFixed(1)} s (attempt ${state.attempt})…`, 'reconnecting');
      state.timer = setTimeout(open, delay);
    } else if (ui.status.dataset.state !== 'stopped') {
      setStatus('Disconnected.', 'idle');
    }
    refreshButtons();
  }

  function onFrame(data) {
    // A batch (docs/batching.md): consecutive event envelopes separated by "\n".
    if (typeof data === 'string' && data.includes('\n')) {
      for (const part of data.split('\n')) onFrame(part);
      return;
    }
    let f;
    try {
      f = JSON.parse(data);
    } catch {
      logRow('?', 'unparseable frame', String(data), 'proto');
      return;
    }
    if (f === null || typeof f !== 'object') {
      logRow('?', 'unexpected frame', String(data), 'proto');
    } else if ('seq' in f) {
      onEvent(f);
    } else if (f.type === 'hello') {
      onHello(f);
    } else if (f.type === 'replay_truncated') {
      logRow('—', f.type, json(f), 'proto');
      note(`Replay truncated: events ${f.requested_from_seq}–${f.from_seq - 1} are not available over the socket.`, 'warn');
      state.awaiting = f.from_seq;
      state.next = f.from_seq;
    } else if (f.type === 'error') {
      onError(f);
    } else {
      logRow('—', String(f.type), json(f), 'proto');
    }
  }

  function onHello(f) {
    let from = state.next;
    if (from > f.last_seq + 1) {
      // The stored seq belongs to an older log (a restarted in-memory store): start over.
      resetView();
      note(`Seq ${from - 1} is beyond this session's last seq ${f.last_seq}: replaying from 0.`, 'warn');
      from = 0;
    }
    logRow('—', 'hello', json(f), 'proto');
    state.ready = true;
    state.attempt = 0;
    setStatus(`Connected to session ${f.session_id} (last seq ${f.last_seq}).`, 'connected');
    if (from > 0 && ui.chat.childElementCount === 0) {
      note(`Showing events from seq ${from} on. Connect with "Subscribe from seq" 0 for the whole history.`);
    }
    state.next = from;
    state.awaiting = from;
    send({ type: 'subscribe', from_seq: from, batch: true });
    refreshButtons();
  }

  function onEvent(e) {
    if (state.awaiting !== null) {
      // Frames of a replaced subscription may still arrive before the new replay starts.
      if (e.seq !== state.awaiting) return;
      state.awaiting = null;
    }
    if (e.seq < state.next) return; // already shown
    if (e.seq > state.next) {
      logRow('!', 'gap', `expected seq ${state.next}, got ${e.seq}`, 'proto warn');
    }
    state.next = e.seq + 1;
    storeSeq(state.url, e.seq);
    ui.fromSeq.value = String(state.next);
    logRow(String(e.seq), String(e.type), json(e.payload), 'event');
    render(e);
  }

  function onError(f) {
    logRow('—', 'error', json(f), 'proto error');
    showError(`${f.code}: ${f.message}`);
    if (f.code === 'stale_call') {
      for (const [id, li] of state.standing) {
        if (li.dataset.pending === 'true') {
          state.standing.delete(id);
          settle(li, 'Not standing any more.');
        }
      }
    }
    if (FINAL_CODES.has(f.code)) {
      state.wanted = false;
      clearTimeout(state.timer);
      setStatus(`Stopped: ${f.code}. Not reconnecting.`, 'stopped');
      refreshButtons();
    }
  }

  function connect() {
    clearError();
    const agent = ui.agent.value.trim();
    if (!ui.agent.checkValidity() || agent === '') {
      showError('The agent id is 1–128 of A–Z a–z 0–9 . _ -');
      ui.agent.focus();
      return;
    }
    const server = ui.server.value.trim().replace(/\/+$/, '');
    const from = Number.parseInt(ui.fromSeq.value, 10);
    if (state.ws !== null) {
      const old = state.ws;
      state.ws = null; // its close is no drop
      old.close(1000, 'reconnecting');
    }
    remember('terret.agent', agent);
    resetView();
    Object.assign(state, {
      agent, token: ui.token.value.trim(), url: `${server}/agents/${encodeURIComponent(agent)}/ws`,
      wanted: true, attempt: 0, next: Number.isFinite(from) && from >= 0 ? from : 0, awaiting: null,
    });
    open();
  }

  function disconnect() {
    state.wanted = false;
    clearTimeout(state.timer);
    if (state.ws !== null) {
      state.ws.close(1000, 'bye');
    } else {
      setStatus('Disconnected.', 'idle');
    }
    refreshButtons();
  }

  async function devToken() {
    clearError();
    const agent = ui.agent.value.trim();
    if (!ui.agent.checkValidity() || agent === '') {
      showError('Enter an agent id first.');
      ui.agent.focus();
      return;
    }
    ui.devToken.disabled = true;
    try {
      // The header makes a cross-site request need a preflight, which is refused.
      const r = await fetch('dev/token?agent=' + encodeURIComponent(agent), {
        method: 'GET', headers: { 'X-Terret-Dev': '1' }, cache: 'no-store',
      });
      if (r.status === 404) throw new Error('dev tokens are served only by terret dev');
      if (!r.ok) throw new Error(`dev token: ${r.status} ${(await r.text()).trim()}`);
      const body = await r.json();
      ui.token.value = body.token;
      setStatus(`Dev token created for ${agent}.`, ui.status.dataset.state === 'connected' ? 'connected' : 'idle');
    } catch (err) {
      showError(String(err.message || err));
    } finally {
      ui.devToken.disabled = false;
    }
  }

  function fromStored() {
    const server = ui.server.value.trim().replace(/\/+$/, '');
    const agent = ui.agent.value.trim();
    const seq = agent ? storedSeq(`${server}/agents/${encodeURIComponent(agent)}/ws`) : null;
    ui.fromSeq.value = String(seq === null || !Number.isFinite(seq) ? 0 : seq + 1);
  }

  // ---- wiring ----

  const here = location.host ? (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host : 'ws://127.0.0.1:3001';
  ui.server.value = here;
  ui.agent.value = recall('terret.agent') || '';
  fromStored();

  ui.agent.addEventListener('input', fromStored);
  ui.server.addEventListener('input', fromStored);
  ui.connectForm.addEventListener('submit', (ev) => { ev.preventDefault(); connect(); });
  ui.disconnect.addEventListener('click', disconnect);
  ui.devToken.addEventListener('click', devToken);
  ui.sendForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = ui.message.value;
    if (text.trim() === '') return;
    clearError();
    if (send({ type: 'inject', text, wake: ui.wake.checked })) ui.message.value = '';
  });
  ui.message.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      ui.sendForm.requestSubmit();
    }
  });
  ui.cancel.addEventListener('click', () => { clearError(); send({ type: 'cancel' }); });
  refreshButtons();
})();
