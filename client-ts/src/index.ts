export * from './protocol.gen.js';
export * from './errors.js';
export * from './cursor.js';
export { splitMessage } from './batch.js';
export { agentURL, agentIdOf } from './url.js';
export { framesURL, sendFrame, type SendFrameOptions } from './http.js';
export {
  TerretClient, isEvent, KEEPALIVE_FRAME, DEFAULT_KEEPALIVE_MS, newClientId,
  type ClientOptions, type ConnectionState, type Notice, type SessionEvent, type Status, type StreamItem,
  type WebSocketConstructor, type WebSocketLike,
} from './client.js';
export * from './projection.js';
export {
  LogReader, eventsURL, readEvents,
  type AbortSignalLike, type EventsPage, type FetchLike, type FetchResponseLike, type LogReaderOptions, type ReadEventsOptions,
} from './events.js';
