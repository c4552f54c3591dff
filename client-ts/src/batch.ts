/**
 * splitMessage splits one WebSocket text message into the JSON texts it holds. A
 * message is one frame, or — once the server packs events (subscribe with batch: true)
 * — several session events one per line, separated by "\n". The split is done by
 * scanning JSON, not by splitting on newlines, so a payload that holds a newline in
 * its whitespace cannot cut an event in two. Whitespace between values is skipped;
 * text that is not a sequence of whole JSON objects is returned as the last element,
 * so the caller's JSON.parse reports it.
 */
export function splitMessage(text: string): string[] {
  const out: string[] = [];
  const n = text.length;
  let i = 0;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) {
      i++;
      continue;
    }
    if (c !== 0x7b /* { */) {
      out.push(text.slice(i));
      return out;
    }
    const start = i;
    let depth = 0;
    let inString = false;
    for (; i < n; i++) {
      const ch = text.charCodeAt(i);
      if (inString) {
        if (ch === 0x5c /* \ */) i++;
        else if (ch === 0x22 /* " */) inString = false;
        continue;
      }
      if (ch === 0x22) inString = true;
      else if (ch === 0x7b || ch === 0x5b) depth++;
      else if (ch === 0x7d || ch === 0x5d) {
        depth--;
        if (depth === 0) {
          i++;
          break;
        }
      }
    }
    if (depth !== 0 || inString) {
      out.push(text.slice(start));
      return out;
    }
    out.push(text.slice(start, i));
  }
  return out;
}
