// The one way the UI talks to the hub: relative URLs (resolved against the page's <base href>, so
// the UI works under any base path), JSON in and out, and every failure turned into an `ApiError`
// whose message is the problem document's `detail`, never a bare status code.

import { t } from '../i18n.svelte';

/** What the hub sends on failure: an RFC 9457 problem document (hub/src/api/error.rs). */
export interface ProblemBody {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  code?: string;
  field?: string;
  details?: string[];
  currentVersion?: string;
  protectedBy?: ProtectedBy | null;
}

/** The protected network that made the lockout guard refuse a ban (`guard_protected_network`). */
export interface ProtectedBy {
  network: string;
  kind: string;
  note: string;
}

/** A failed request, in words an operator can act on. */
export class ApiError extends Error {
  readonly status: number;
  /** The problem's stable `code`, or `network` / `http_<status>` when the hub sent none. */
  readonly code: string;
  readonly title: string;
  /** The request field at fault, for validation errors. */
  readonly field?: string;
  /** fail2ban's own messages, line by line. */
  readonly details: string[];
  /** For a configuration conflict: the file's version now. */
  readonly currentVersion?: string;
  /** For a ban the lockout guard refused: the entry that protects the address. */
  readonly protectedBy?: ProtectedBy;

  constructor(init: {
    status: number;
    code: string;
    title: string;
    detail: string;
    field?: string;
    details?: string[];
    currentVersion?: string;
    protectedBy?: ProtectedBy;
  }) {
    super(init.detail);
    this.name = 'ApiError';
    this.status = init.status;
    this.code = init.code;
    this.title = init.title;
    this.field = init.field;
    this.details = init.details ?? [];
    this.currentVersion = init.currentVersion;
    this.protectedBy = init.protectedBy;
  }

  /** The session ended or never existed: the UI goes to the login page. */
  get unauthenticated(): boolean {
    return this.status === 401;
  }

  get forbidden(): boolean {
    return this.status === 403;
  }
}

/** The statuses with words of their own, each the message `errors.http<status>`. */
const STATUS_WORDS = new Set([400, 401, 403, 404, 409, 413, 422, 500, 502, 503, 504]);

/** The UI's own words for `status`, none for a status without them. */
function statusWords(status: number): string | undefined {
  return STATUS_WORDS.has(status) ? t(`errors.http${status}`) : undefined;
}

/**
 * Turns a failed response into an `ApiError`. A problem document gives its own words; anything else
 * (a proxy's HTML error page, an empty body) gets a sentence naming the status and a short excerpt of
 * what came back, so nothing is swallowed.
 */
export function errorFromResponse(status: number, contentType: string | null, bodyText: string): ApiError {
  const type = (contentType ?? '').toLowerCase();
  if (type.includes('json')) {
    try {
      const p = JSON.parse(bodyText) as ProblemBody;
      if (p && typeof p === 'object' && (p.detail || p.title || p.code)) {
        return new ApiError({
          status: typeof p.status === 'number' ? p.status : status,
          code: p.code ?? `http_${status}`,
          title: p.title ?? statusWords(status) ?? `HTTP ${status}`,
          detail: p.detail ?? p.title ?? statusWords(status) ?? `HTTP ${status}`,
          field: p.field ?? undefined,
          details: Array.isArray(p.details) ? p.details.map(String) : [],
          currentVersion: p.currentVersion ?? undefined,
          protectedBy: p.protectedBy ?? undefined,
        });
      }
    } catch {
      // Not JSON after all: described below like any other body.
    }
  }
  const words = statusWords(status) ?? (status >= 500 ? t('errors.http500') : t('errors.requestFailed'));
  const excerpt = type.includes('html') ? '' : bodyText.trim().replace(/\s+/g, ' ').slice(0, 200);
  return new ApiError({
    status,
    code: `http_${status}`,
    title: words,
    detail: excerpt ? `${words} (HTTP ${status}): ${excerpt}` : `${words} (HTTP ${status}).`,
  });
}

/** A request that never got an answer. */
export function networkError(cause: unknown): ApiError {
  const why = cause instanceof Error ? cause.message : String(cause);
  return new ApiError({
    status: 0,
    code: 'network',
    title: t('errors.unreachable'),
    detail: t('errors.unreachableDetail', { why }),
  });
}

/** Query values: absent, empty and null values are left out. */
export type Query = Record<string, string | number | boolean | null | undefined>;

/** `api/x` + query string, relative to the page's base. */
export function apiUrl(path: string, query?: Query): string {
  const clean = path.replace(/^\/+/, '');
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query ?? {})) {
    if (value === undefined || value === null || value === '') continue;
    params.set(key, String(value));
  }
  const qs = params.toString();
  return qs ? `${clean}?${qs}` : clean;
}

export interface RequestOptions {
  query?: Query;
  body?: unknown;
  /** Sent as `X-BanDaemon-Server` (server id). */
  server?: string | null;
  signal?: AbortSignal;
}

type Listener = (error: ApiError) => void;
const unauthenticatedListeners = new Set<Listener>();

/** Called whenever any request comes back 401, so the app can send the user to the login page. */
export function onUnauthenticated(listener: Listener): () => void {
  unauthenticatedListeners.add(listener);
  return () => unauthenticatedListeners.delete(listener);
}

export type Fetch = (input: string, init: RequestInit) => Promise<Response>;
let fetcher: Fetch = (input, init) => fetch(input, init);

/** Replaces `fetch` (unit tests). */
export function setFetch(f: Fetch): void {
  fetcher = f;
}

/** Sends one request and returns the parsed JSON body (undefined for 204). */
export async function request<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
  const headers: Record<string, string> = { Accept: 'application/json' };
  let body: string | undefined;
  if (options.body !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(options.body);
  }
  if (options.server) headers['X-BanDaemon-Server'] = options.server;
  let response: Response;
  try {
    response = await fetcher(apiUrl(path, options.query), {
      method,
      headers,
      body,
      credentials: 'same-origin',
      signal: options.signal,
    });
  } catch (cause) {
    if (cause instanceof DOMException && cause.name === 'AbortError') throw cause;
    throw networkError(cause);
  }
  if (!response.ok) {
    const text = await response.text().catch(() => '');
    const error = errorFromResponse(response.status, response.headers.get('content-type'), text);
    if (error.unauthenticated) for (const listener of unauthenticatedListeners) listener(error);
    throw error;
  }
  if (response.status === 204) return undefined as T;
  const text = await response.text();
  if (!text) return undefined as T;
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new ApiError({
      status: response.status,
      code: 'bad_response',
      title: t('errors.unexpected'),
      detail: t('errors.unexpectedDetail', { path }),
    });
  }
}

export const get = <T>(path: string, options?: RequestOptions) => request<T>('GET', path, options);
export const post = <T>(path: string, body?: unknown, options?: RequestOptions) =>
  request<T>('POST', path, { ...options, body });
export const del = <T>(path: string, options?: RequestOptions) => request<T>('DELETE', path, options);

/** Words for any thrown value, for error boxes. */
export function describe(error: unknown): string {
  if (error instanceof ApiError) return error.message;
  if (error instanceof Error) return error.message;
  return String(error);
}
