import { afterEach, describe, expect, it } from 'vitest';
import { bucketLabel, jailBars, serverBars, statsColumns } from '../../src/lib/chart';
import { shortDateTime, timeTick } from '../../src/lib/format';
import { setLocale } from '../../src/lib/i18n.svelte';

const at = (h: number) => new Date(Date.UTC(2026, 10, 22, h)).toISOString();
const sec = (h: number) => Date.UTC(2026, 10, 22, h) / 1000;

describe('statsColumns', () => {
  it('fills buckets the hub left out with zeros', () => {
    const cols = statsColumns({
      from: at(0),
      to: at(4),
      bucketSeconds: 3600,
      series: [
        { start: at(1), bans: 3, unbans: 1, gaps: 0 },
        { start: at(3), bans: 2, unbans: 0, gaps: 0 },
      ],
    });
    expect(cols).toEqual([
      [sec(0), sec(1), sec(2), sec(3)],
      [0, 3, 0, 2],
      [0, 1, 0, 0],
    ]);
  });

  it('keeps points that are off the grid, in time order', () => {
    const off = new Date(Date.UTC(2026, 10, 22, 1, 30)).toISOString();
    const cols = statsColumns({ from: at(0), to: at(2), bucketSeconds: 3600, series: [{ start: off, bans: 5, unbans: 0, gaps: 0 }] });
    expect(cols[0]).toEqual([sec(0), sec(1), sec(1) + 1800]);
    expect(cols[1]).toEqual([0, 0, 5]);
  });

  it('draws nothing for a broken range rather than looping', () => {
    expect(statsColumns({ from: at(0), to: at(2), bucketSeconds: 0, series: [] })).toEqual([[], [], []]);
    expect(statsColumns({ from: 'nonsense', to: at(2), bucketSeconds: 3600, series: [] })).toEqual([[], [], []]);
  });
});

describe('bars', () => {
  it('ranks jails and names deleted servers', () => {
    const jails = jailBars([
      { jail: 'sshd', bans: 9, unbans: 1, gaps: 0 },
      { jail: 'nginx', bans: 4, unbans: 0, gaps: 0 },
    ]);
    expect(jails.labels).toEqual(['sshd', 'nginx']);
    expect(jails.columns).toEqual([[0, 1], [9, 4]]);
    const servers = serverBars([{ serverId: '0123456789abcdef', serverName: null, bans: 2, unbans: 0, gaps: 0 }]);
    expect(servers.labels).toEqual(['01234567 (deleted)']);
  });

  it('keeps at most max entries', () => {
    const many = Array.from({ length: 15 }, (_, i) => ({ jail: `j${i}`, bans: 15 - i, unbans: 0, gaps: 0 }));
    expect(jailBars(many, 10).labels).toHaveLength(10);
  });
});

describe('bucketLabel', () => {
  it('shows the time only for buckets shorter than a day', () => {
    const t = new Date(2026, 10, 22, 13, 5).getTime() / 1000;
    expect(bucketLabel(t, 3600)).toBe('2026-11-22 13:05');
    expect(bucketLabel(t, 86400)).toBe('2026-11-22');
  });
});

describe('chart labels in the locale', () => {
  afterEach(() => setLocale('en'));
  const afternoon = new Date(2026, 10, 22, 14, 0).getTime() / 1000;

  it('writes time ticks as the time of day, or the day over a longer span', async () => {
    expect(timeTick(afternoon, 86400)).toBe('02:00 PM');
    expect(timeTick(afternoon, 7 * 86400)).toBe('Nov 22');
    await setLocale('de');
    expect(timeTick(afternoon, 86400)).toBe('14:00');
    expect(timeTick(afternoon, 7 * 86400)).toBe('22. Nov.');
  });

  it('writes legend times and deleted servers in the locale', async () => {
    expect(shortDateTime(afternoon)).toBe('11/22/26, 2:00 PM');
    await setLocale('de');
    expect(shortDateTime(afternoon)).toBe('22.11.26, 14:00');
    expect(serverBars([{ serverId: '0123456789abcdef', serverName: null, bans: 2, unbans: 0, gaps: 0 }]).labels).toEqual(['01234567 (gelöscht)']);
  });
});
