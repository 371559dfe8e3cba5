// The events page's filters, as they sit in the page URL and as the API's query parameters.
import type { Query } from './api/client';
import { localInputToIso } from './format';

export interface EventFilters {
  serverId: string;
  jail: string;
  ip: string;
  kind: string; // '', 'ban', 'unban', 'gap'
  source: string; // '', 'action', 'observed', 'direct'
  from: string; // datetime-local value
  to: string;
  q: string;
}

export const FILTER_KEYS: (keyof EventFilters)[] = ['serverId', 'jail', 'ip', 'kind', 'source', 'from', 'to', 'q'];

export function emptyFilters(): EventFilters {
  return { serverId: '', jail: '', ip: '', kind: '', source: '', from: '', to: '', q: '' };
}

/** Filters from the page's query string; unknown keys are ignored. */
export function filtersFromSearch(search: string): EventFilters {
  const params = new URLSearchParams(search);
  const f = emptyFilters();
  for (const key of FILTER_KEYS) f[key] = params.get(key)?.trim() ?? '';
  return f;
}

/** The page's query string for the filters (empty ones left out). */
export function filtersToSearch(f: EventFilters): URLSearchParams {
  const params = new URLSearchParams();
  for (const key of FILTER_KEYS) if (f[key].trim()) params.set(key, f[key].trim());
  return params;
}

/** The API's query parameters for the filters. */
export function filtersToQuery(f: EventFilters): Query {
  const t = (s: string) => s.trim() || undefined;
  return {
    serverId: t(f.serverId),
    jail: t(f.jail),
    ip: t(f.ip),
    kind: t(f.kind),
    source: t(f.source),
    from: localInputToIso(f.from.trim()),
    to: localInputToIso(f.to.trim()),
    q: t(f.q),
  };
}
