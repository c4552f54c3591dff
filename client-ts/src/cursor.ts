/**
 * A Cursor records the highest seq the caller has received, so a later client (or a
 * reloaded page) resumes after it. load returns null when nothing is recorded. Both
 * may be asynchronous; an error from either stops the client. One cursor belongs to
 * one agent.
 */
export interface Cursor {
  load(): number | null | Promise<number | null>;
  store(seq: number): void | Promise<void>;
  /**
   * loadEpoch returns the epoch (hello's `epoch`) of the log the recorded seq belongs
   * to, null when none is recorded. With loadEpoch and storeEpoch a cursor never
   * resumes a log that was reset or deleted since; without them the client compares
   * epochs only within its own lifetime.
   */
  loadEpoch?(): string | null | Promise<string | null>;
  /** storeEpoch records epoch; with restart it also forgets the seq (load then returns null until the next store). */
  storeEpoch?(epoch: string, restart: boolean): void | Promise<void>;
}

/** MemoryCursor keeps the seq and epoch in memory: they survive reconnects, not the process. */
export class MemoryCursor implements Cursor {
  private seq: number | null;
  private epoch: string | null = null;
  constructor(seq: number | null = null) {
    this.seq = seq;
  }
  load(): number | null {
    return this.seq;
  }
  store(seq: number): void {
    this.seq = seq;
  }
  loadEpoch(): string | null {
    return this.epoch;
  }
  storeEpoch(epoch: string, restart: boolean): void {
    this.epoch = epoch;
    if (restart) this.seq = null;
  }
}

/** StorageLike is the part of the Web Storage API (localStorage) a StorageCursor uses. */
export interface StorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

/**
 * StorageCursor keeps the seq as decimal text under key in a Web Storage (by default
 * globalThis.localStorage), and the log's epoch under key + ":epoch": what a browser
 * page uses to resume after a reload. A value that is not a seq reads as nothing
 * recorded.
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
  loadEpoch(): string | null {
    return this.storage.getItem(this.key + ':epoch') || null;
  }
  storeEpoch(epoch: string, restart: boolean): void {
    this.storage.setItem(this.key + ':epoch', epoch);
    if (restart) this.storage.setItem(this.key, '');
  }
}

/** localStorageCursor is a StorageCursor over the browser's localStorage. */
export function localStorageCursor(key: string): StorageCursor {
  return new StorageCursor(key);
}

/** callbackCursor makes a Cursor of two functions, e.g. over a database row. */
export function callbackCursor(load: Cursor['load'], store: Cursor['store'], loadEpoch?: Cursor['loadEpoch'], storeEpoch?: Cursor['storeEpoch']): Cursor {
  return loadEpoch && storeEpoch ? { load, store, loadEpoch, storeEpoch } : { load, store };
}
