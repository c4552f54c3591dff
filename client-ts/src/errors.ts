import { CLOSING_CODES, ERROR_CODE_DOCS, type ErrorCode } from './protocol.gen.js';

/** TerretError is the base class of every error this package throws or reports. */
export class TerretError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * ProtocolError is an error frame of the server. `code` says what happened and
 * `closes` whether the server closed the connection after it: unauthorized and
 * superseded stop the client, lagged and internal make it reconnect, the others are
 * notices and leave the connection open. A code newer than this package keeps its
 * string and counts as a notice.
 */
export class ProtocolError extends TerretError {
  readonly code: ErrorCode;
  readonly serverMessage: string;
  constructor(code: ErrorCode, message: string) {
    super(`${code}: ${message}`);
    this.code = code;
    this.serverMessage = message;
  }
  /** Whether the server closes the connection after this code. */
  get closes(): boolean {
    return CLOSING_CODES.includes(this.code);
  }
  /** What the code means, from the protocol's schema ('' for an unknown code). */
  get description(): string {
    return (ERROR_CODE_DOCS as Record<string, string>)[this.code] ?? '';
  }
  /** Whether err is a ProtocolError, of the given code when one is given. */
  static is(err: unknown, code?: ErrorCode): err is ProtocolError {
    return err instanceof ProtocolError && (code === undefined || err.code === code);
  }
}

/** ClosedError is thrown by the methods of a stopped client; `cause` is why it stopped. */
export class ClosedError extends TerretError {}

/**
 * ProtocolViolationError reports a server that broke the protocol: a first frame other
 * than hello, an undecodable frame, a gap in seq, a hello.proto this client does not
 * speak (only the last stops the client; the others are reconnected through).
 */
export class ProtocolViolationError extends TerretError {}

/** ConnectionError reports a connection that failed or dropped (network, close, timeout). */
export class ConnectionError extends TerretError {
  /** The WebSocket close code, when the socket closed. */
  readonly closeCode?: number;
  constructor(message: string, closeCode?: number, options?: { cause?: unknown }) {
    super(message, options);
    this.closeCode = closeCode;
  }
}

/** BadURLError reports a URL that names no agent socket. */
export class BadURLError extends TerretError {}
