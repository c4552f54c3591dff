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
  readonly searchParams: { get(name: string): string | null; set(name: string, value: string): void };
  toString(): string;
}
declare const crypto: { getRandomValues<T extends Uint8Array>(array: T): T };
declare function fetch(
  url: string,
  init?: { method?: string; headers?: Record<string, string>; body?: string; signal?: unknown },
): Promise<{ status: number; text(): Promise<string> }>;
