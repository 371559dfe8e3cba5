// The live ban feed: the hub's Server-Sent Events stream (`GET /api/events/stream`), newest first,
// bounded, without duplicates. EventSource reconnects by itself and resumes with Last-Event-ID; when
// the hub refuses the stream (it closes for good), we reopen it after a growing pause.
import { apiUrl, type Query } from './api/client';
import type { Event } from './api/types';

/** Adds an event to a newest-first feed of at most `max`, ignoring one already there. */
export function pushEvent(feed: readonly Event[], event: Event, max: number): Event[] {
  if (feed.some((e) => e.id === event.id)) return feed as Event[];
  const next = [event, ...feed];
  next.sort((a, b) => b.id - a.id);
  return next.slice(0, max);
}

/** Parses one SSE `data` payload; null for anything that is not an event. */
export function parseEvent(data: string): Event | null {
  try {
    const value = JSON.parse(data) as Event;
    return value && typeof value.id === 'number' && typeof value.kind === 'string' ? value : null;
  } catch {
    return null;
  }
}

export type LiveState = 'connecting' | 'open' | 'retrying';

export interface LiveHandlers {
  onEvent: (event: Event) => void;
  onState: (state: LiveState) => void;
}

/** Opens the stream; returns the function that closes it. */
export function openLive(query: Query, handlers: LiveHandlers): () => void {
  let source: EventSource | null = null;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let pause = 1000;
  let lastId: number | null = null;
  let closed = false;

  const connect = () => {
    if (closed) return;
    handlers.onState('connecting');
    const q: Query = { ...query };
    if (lastId !== null) q.lastEventId = lastId;
    source = new EventSource(apiUrl('api/events/stream', q), { withCredentials: true });
    source.onopen = () => {
      pause = 1000;
      handlers.onState('open');
    };
    source.onmessage = (message) => {
      const event = parseEvent(message.data);
      if (!event) return;
      lastId = Math.max(lastId ?? 0, event.id);
      handlers.onEvent(event);
    };
    source.onerror = () => {
      if (!source || source.readyState !== EventSource.CLOSED) {
        handlers.onState('connecting');
        return;
      }
      handlers.onState('retrying');
      source = null;
      timer = setTimeout(connect, pause);
      pause = Math.min(pause * 2, 30000);
    };
  };
  connect();
  return () => {
    closed = true;
    if (timer) clearTimeout(timer);
    source?.close();
  };
}
