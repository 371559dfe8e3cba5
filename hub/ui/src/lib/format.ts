// How times, durations and counts read in the UI, in the current locale (`Intl` formatters, kept per
// locale); the units of ban lengths come from the `format` message area.
import { locale, t } from './i18n.svelte';

const pad = (n: number) => String(n).padStart(2, '0');

const cache = new Map<string, Intl.DateTimeFormat | Intl.NumberFormat | Intl.RelativeTimeFormat>();

function cached<T extends Intl.DateTimeFormat | Intl.NumberFormat | Intl.RelativeTimeFormat>(kind: string, make: (loc: string) => T): T {
  const loc = locale();
  const key = `${kind}:${loc}`;
  let f = cache.get(key) as T | undefined;
  if (!f) cache.set(key, (f = make(loc)));
  return f;
}

/** A date and time in the browser's time zone, written as the locale writes them; "—" for nothing. */
export function dateTime(iso: string | null | undefined): string {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return cached('dateTime', (loc) => new Intl.DateTimeFormat(loc, { dateStyle: 'medium', timeStyle: 'medium' })).format(d);
}

/** "5 sec. ago", "vor 3 Min.", "2 時間前" (relative to `now`); "never" in the locale for nothing. */
export function ago(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return t('format.never');
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return iso;
  const s = Math.max(0, Math.round((now - at) / 1000));
  const rtf = cached('ago', (loc) => new Intl.RelativeTimeFormat(loc, { numeric: 'always', style: 'short' }));
  if (s < 60) return rtf.format(-s, 'second');
  if (s < 3600) return rtf.format(-Math.floor(s / 60), 'minute');
  if (s < 86400) return rtf.format(-Math.floor(s / 3600), 'hour');
  return rtf.format(-Math.floor(s / 86400), 'day');
}

/** "in 59 min", "in 1 Std.", "1 日後" (relative to `now`); "—" for nothing. */
export function until(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '—';
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return iso;
  const s = Math.max(0, Math.round((at - now) / 1000));
  const rtf = cached('until', (loc) => new Intl.RelativeTimeFormat(loc, { numeric: 'always', style: 'short' }));
  if (s < 60) return rtf.format(s, 'second');
  if (s < 3600) return rtf.format(Math.round(s / 60), 'minute');
  if (s < 86400) return rtf.format(Math.round(s / 3600), 'hour');
  return rtf.format(Math.round(s / 86400), 'day');
}

/** A ban length in seconds: "10 min", "1 h 30 min", "permanent" for -1 (in the locale's words). */
export function duration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined) return '—';
  if (seconds < 0) return t('format.permanent');
  if (seconds < 60) return t('format.seconds', { n: seconds });
  const d = Math.floor(seconds / 86400);
  const h = Math.floor((seconds % 86400) / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const parts = [
    d && t('format.days', { n: d }),
    h && t('format.hours', { n: h }),
    m && t('format.minutes', { n: m }),
  ].filter(Boolean);
  return parts.length ? parts.join(' ') : t('format.seconds', { n: seconds });
}

/** A count with the locale's digit grouping ("12,345", "12.345", "12 345"); "—" for nothing. */
export function count(n: number | null | undefined): string {
  return n === null || n === undefined ? '—' : cached('count', (loc) => new Intl.NumberFormat(loc)).format(n);
}

/** A tick on a chart's time axis (Unix seconds): the day over a span of more than two days, else the
 * time of day, as the locale writes them ("27. Nov.", "14:00", "午後2:00"). */
export function timeTick(seconds: number, spanSeconds: number): string {
  const days = spanSeconds > 2 * 86400;
  const f = cached(days ? 'tickDay' : 'tickTime', (loc) =>
    new Intl.DateTimeFormat(loc, days ? { month: 'short', day: 'numeric' } : { hour: '2-digit', minute: '2-digit' }),
  );
  return f.format(new Date(seconds * 1000));
}

/** A point in time on a chart's legend (Unix seconds), short date and time in the locale. */
export function shortDateTime(seconds: number): string {
  return cached('shortDateTime', (loc) => new Intl.DateTimeFormat(loc, { dateStyle: 'short', timeStyle: 'short' })).format(new Date(seconds * 1000));
}

/** A value for <input type="datetime-local"> → RFC 3339 (UTC), or undefined when empty/invalid. */
export function localInputToIso(value: string): string | undefined {
  if (!value) return undefined;
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? undefined : d.toISOString();
}

/** RFC 3339 → a value for <input type="datetime-local"> in the browser's time zone. */
export function isoToLocalInput(iso: string | null | undefined): string {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}
