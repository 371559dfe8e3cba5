// Shapes API answers into the column arrays uPlot draws: x in Unix seconds, one array per series.
import type { JailCounts, ServerCounts, Stats } from './api/types';
import { t } from './i18n.svelte';

export type Columns = [number[], ...number[][]];

/**
 * The stats series as [x, bans, unbans], one point per bucket from `from` to `to`, zeros where the
 * hub sent no point (so a quiet hour draws as zero, not as a line between its neighbours).
 */
export function statsColumns(stats: Pick<Stats, 'from' | 'to' | 'bucketSeconds' | 'series'>): Columns {
  const step = stats.bucketSeconds;
  const start = Math.floor(Date.parse(stats.from) / 1000);
  const end = Math.floor(Date.parse(stats.to) / 1000);
  const byStart = new Map<number, { bans: number; unbans: number }>();
  for (const p of stats.series) {
    byStart.set(Math.floor(Date.parse(p.start) / 1000), { bans: p.bans, unbans: p.unbans });
  }
  const xs: number[] = [];
  const bans: number[] = [];
  const unbans: number[] = [];
  if (!(step > 0) || !Number.isFinite(start) || !Number.isFinite(end)) return [xs, bans, unbans];
  for (let t = start; t < end; t += step) {
    const point = byStart.get(t);
    xs.push(t);
    bans.push(point?.bans ?? 0);
    unbans.push(point?.unbans ?? 0);
    byStart.delete(t);
  }
  // Points off the grid (a hub with another bucket alignment) are kept rather than dropped.
  if (byStart.size > 0) {
    const rows = xs.map((x, i) => [x, bans[i], unbans[i]]);
    for (const [t, c] of byStart) rows.push([t, c.bans, c.unbans]);
    rows.sort((a, b) => a[0] - b[0]);
    return [rows.map((r) => r[0]), rows.map((r) => r[1]), rows.map((r) => r[2])];
  }
  return [xs, bans, unbans];
}

/** A ranking as bar-chart data: labels and [index, values]. */
export interface Bars {
  labels: string[];
  columns: Columns;
}

export function barsOf<T>(rows: readonly T[], label: (row: T) => string, value: (row: T) => number, max = 10): Bars {
  const top = rows.slice(0, max);
  return {
    labels: top.map(label),
    columns: [top.map((_, i) => i), top.map(value)],
  };
}

export function jailBars(rows: readonly JailCounts[], max = 10): Bars {
  return barsOf(rows, (r) => r.jail, (r) => r.bans, max);
}

export function serverBars(rows: readonly ServerCounts[], max = 10): Bars {
  return barsOf(rows, (r) => r.serverName ?? t('common.deletedServer', { id: r.serverId.slice(0, 8) }), (r) => r.bans, max);
}

/** A readable label for a bucket start, shorter for longer buckets. */
export function bucketLabel(seconds: number, bucketSeconds: number): string {
  const d = new Date(seconds * 1000);
  const pad = (n: number) => String(n).padStart(2, '0');
  const day = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
  return bucketSeconds >= 86400 ? day : `${day} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/** The ranges the insight and dashboard pickers offer, in hours, each with the message key of its label. */
export const RANGES: { label: string; hours: number }[] = [
  { label: 'insights.range24h', hours: 24 },
  { label: 'insights.range7d', hours: 24 * 7 },
  { label: 'insights.range30d', hours: 24 * 30 },
  { label: 'insights.range90d', hours: 24 * 90 },
];
