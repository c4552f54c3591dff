import { BadURLError } from './errors.js';

const AGENT_ID = /^[A-Za-z0-9._-]{1,128}$/;

/**
 * agentURL builds an agent's socket URL from a base: a template holding "{agent_id}"
 * (what `terret dev` prints), a server root (ws://HOST → ws://HOST/agents/ID/ws) or an
 * API Gateway stage URL (wss://API/STAGE → wss://API/STAGE?agent_id=ID). http and https
 * are read as ws and wss.
 */
export function agentURL(base: string, agentId: string): string {
  if (!AGENT_ID.test(agentId)) throw new BadURLError(`agent id ${JSON.stringify(agentId)}: must be 1-128 of [A-Za-z0-9._-]`);
  if (base.includes('{agent_id}')) return toWS(base.replaceAll('{agent_id}', agentId));
  const u = parse(base);
  if (/\.execute-api\.[^.]+\.amazonaws\.com$/.test(u.hostname) && u.pathname.replace(/\/+$/, '') !== '') {
    u.searchParams.set('agent_id', agentId);
    return u.toString();
  }
  u.pathname = u.pathname.replace(/\/+$/, '') + `/agents/${agentId}/ws`;
  return u.toString();
}

/** agentIdOf reads the agent id from a socket URL in either form, or throws BadURLError. */
export function agentIdOf(url: string): string {
  const u = parse(url);
  const q = u.searchParams.get('agent_id');
  const m = /\/agents\/([^/]+)\/ws$/.exec(u.pathname);
  const id = q ?? (m ? decodeURIComponent(m[1]!) : null);
  if (id === null || !AGENT_ID.test(id)) throw new BadURLError(`${url}: names no agent (want …/agents/{agent_id}/ws or ?agent_id=)`);
  return id;
}

function toWS(url: string): string {
  return parse(url).toString();
}

function parse(url: string): URL {
  let u: URL;
  try {
    u = new URL(url);
  } catch (err) {
    throw new BadURLError(`${url}: not a URL`, { cause: err });
  }
  if (u.protocol === 'http:') u.protocol = 'ws:';
  else if (u.protocol === 'https:') u.protocol = 'wss:';
  if (u.protocol !== 'ws:' && u.protocol !== 'wss:') throw new BadURLError(`${url}: scheme must be ws, wss, http or https`);
  return u;
}
