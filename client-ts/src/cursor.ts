/**
 * A Cursor records the highest seq the caller has received, so a later client (or a
 * reloaded page) resumes after it. load returns null when nothing is recorded. Both
 * may be asynchronous; an error from either stops the client. One cursor belongs to
 * one agent.
 */
export interface Cursor {
  load(): number | null | Promise<number | null>;
  store(seq: number): void | Promise<void>;
}

/** MemoryCursor keeps the seq in memory: it survives reconnects, not the process. */
export class MemoryCursor implements Cursor {
  private seq: number | null;
  constructor(seq: number | null = null) {
    this.seq = seq;
  }
  load(): number | null {
    return this.seq;
  }
  store(seq: number): void {
    this.seq = seq;
  }
}

/** StorageLike is the part of the Web Storage API (localStorage) a StorageCursor uses. */
export interface StorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

/**
 * StorageCursor keeps the seq as decimal text under key in a Web Storage (by default
 * globalThis.localStorage): what a browser page uses to resume after a reload. A value
 * that is not a seq reads as nothing recorded.
 */
export class StorageCursor implements Cursor {
  readonly key: string;
  private readonly storage: StorageLike;
  constructor(key: string, storage?: StorageLike) {
    const s = storage ?? (globalThis as { localStorage?: StorageLike }).localStorage;
    if (!s) throw new TypeError('StorageCursor: no storage given and no globalThis.localStorage');
    this.key = key;
    this.storage = s;
  }
  load(): number | null {
    const v = this.storage.getItem(this.key);
    if (v === null || !/^\d+$/.test(v)) return null;
    const n = Number(v);
    return Number.isSafeInteger(n) ? n : null;
  }
  store(seq: number): void {
    this.storage.setItem(this.key, String(seq));
  }
}

/** localStorageCursor is a StorageCursor over the browser's localStorage. */
export function localStorageCursor(key: string): StorageCursor {
  return new StorageCursor(key);
}

/** callbackCursor makes a Cursor of two functions, e.g. over a database row. */
export function callbackCursor(load: Cursor['load'], store: Cursor['store']): Cursor {
  return { load, store };
}
