// The globals the package uses that both browsers and Node 20+ provide. Declared here,
// rather than pulling in the DOM or Node type libraries, so the published types depend
// on neither.
declare function setTimeout(fn: () => void, ms?: number): unknown;
declare function clearTimeout(handle: unknown): void;
declare class URL {
  constructor(url: string, base?: string);
  protocol: string;
  hostname: string;
  pathname: string;
  search: string;
  readonly searchParams: { get(name: string): string | null; set(name: string, value: string): void };
  toString(): string;
}
// The log over HTTP (events.ts) and frames over HTTP (http.ts): fetch with a streamed
// body, a POST body, and abort.
interface AbortSignal {
  readonly aborted: boolean;
}
declare class AbortController {
  readonly signal: AbortSignal;
  abort(): void;
}
interface FetchResponse {
  readonly ok: boolean;
  readonly status: number;
  text(): Promise<string>;
  readonly body: { getReader(): { read(): Promise<{ value?: Uint8Array; done: boolean }> } } | null;
}
declare function fetch(
  url: string,
  init?: { method?: string; headers?: Record<string, string>; body?: string; signal?: AbortSignal | unknown },
): Promise<FetchResponse>;
declare class TextDecoder {
  decode(input?: Uint8Array, options?: { stream?: boolean }): string;
}
declare const crypto: { getRandomValues<T extends Uint8Array>(array: T): T };
