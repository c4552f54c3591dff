import { BadURLError, ProtocolError, TerretError } from './errors.js';
import type { ClientFrame, ErrorCode } from './protocol.gen.js';
import { newClientId } from './client.js';
import { agentIdOf, agentURL } from './url.js';

/**
 * framesURL is the URL an agent's control frames are posted to over HTTP,
 * http(s)://HOST/agents/{agent_id}/frames, from its socket URL or a base agentURL takes
 * (ws(s) becomes http(s)). The raw API Gateway URL (?agent_id=) serves no HTTP path:
 * BadURLError.
 */
export function framesURL(base: string, agentId?: string): string {
  const sock = agentId === undefined ? base : agentURL(base, agentId);
  const id = agentIdOf(sock);
  const u = new URL(sock);
  if (!u.pathname.endsWith(`/agents/${id}/ws`)) {
    throw new BadURLError(`${base}: frames over HTTP are posted to the host of the agent's /agents/{agent_id}/ws URL (on AWS the CloudFront URL), not the raw API Gateway stage`);
  }
  u.pathname = u.pathname.slice(0, -'ws'.length) + 'frames';
  u.protocol = u.protocol === 'wss:' ? 'https:' : 'http:';
  return u.toString();
}

/** Options of sendFrame. */
export interface SendFrameOptions {
  /** The frame's client_id, sent as the Idempotency-Key header (1–128 characters); default: the frame's client_id, else a new one. */
  idempotencyKey?: string;
  /** Tries of a request that got no answer or 500 internal, each with the same key (the server applies it once); default 3. */
  attempts?: number;
}

/**
 * sendFrame posts one control frame (inject, cancel, approve, deny, set_model,
 * set_policy) to the agent's HTTP path, POST /agents/{agent_id}/frames, with token, and
 * resolves to the client_id it was sent with once the server accepted it (202). A
 * refusal rejects with a ProtocolError of the socket's code (unauthorized, bad_frame,
 * not_running, …). url is the agent's socket URL, or a base with agentId.
 */
export async function sendFrame(url: string, token: string, frame: ClientFrame, options: SendFrameOptions & { agentId?: string } = {}): Promise<string> {
  const target = framesURL(url, options.agentId);
  const body = frame as ClientFrame & { client_id?: string };
  const key = options.idempotencyKey ?? body.client_id ?? newClientId();
  const attempts = Math.max(1, options.attempts ?? 3);
  for (let attempt = 1; ; attempt++) {
    let err: Error;
    try {
      const res = await fetch(target, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}`, 'Idempotency-Key': key },
        body: JSON.stringify(frame),
      });
      const text = await res.text();
      if (res.status === 202) return key;
      let f: { type?: unknown; code?: unknown; message?: unknown } | null = null;
      try {
        f = JSON.parse(text);
      } catch {
        // not an error frame
      }
      if (f && f.type === 'error' && typeof f.code === 'string') {
        err = new ProtocolError(f.code as ErrorCode, String(f.message ?? ''));
        if (f.code !== 'internal') throw err;
      } else {
        throw new TerretError(`client: post frame: status ${res.status}: ${text.slice(0, 200)}`);
      }
    } catch (e) {
      if (e instanceof TerretError && !(e instanceof ProtocolError && e.code === 'internal')) throw e;
      err = e as Error;
    }
    if (attempt >= attempts) throw err;
    await new Promise<void>((r) => setTimeout(r, attempt * 200));
  }
}
