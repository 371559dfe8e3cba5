import { describe, expect, it } from 'vitest';
import { highlight } from '../../src/lib/highlight';
import { parseRoute, pathOf, safeReturnTo, stripBase } from '../../src/lib/routes';
import { allows, strongestRole } from '../../src/lib/roles';
import { filtersFromSearch, filtersToQuery, filtersToSearch } from '../../src/lib/eventQuery';
import { parseEvent, pushEvent } from '../../src/lib/live';
import { chooseServer } from '../../src/lib/servers.svelte';
import { duration } from '../../src/lib/format';
import type { Event, Server } from '../../src/lib/api/types';

describe('highlight', () => {
  it('marks the address where it stands on its own', () => {
    expect(highlight('Failed login for root from 203.0.113.7 port 22', '203.0.113.7')).toEqual([
      { text: 'Failed login for root from ', mark: false },
      { text: '203.0.113.7', mark: true },
      { text: ' port 22', mark: false },
    ]);
  });

  it('does not mark it inside a longer address', () => {
    expect(highlight('from 11.2.3.45 and 1.2.3.4.', '1.2.3.4')).toEqual([
      { text: 'from 11.2.3.45 and ', mark: false },
      { text: '1.2.3.4', mark: true },
      { text: '.', mark: false },
    ]);
  });

  it('marks every occurrence, and nothing without a needle', () => {
    expect(highlight('2001:db8::1 x 2001:db8::1', '2001:db8::1').filter((s) => s.mark)).toHaveLength(2);
    expect(highlight('line', '')).toEqual([{ text: 'line', mark: false }]);
  });
});

describe('routes', () => {
  it('strips the base path', () => {
    expect(stripBase('/banhub/jails/sshd', '/banhub/')).toBe('/jails/sshd');
    expect(stripBase('/banhub', '/banhub/')).toBe('/');
    expect(stripBase('/jails', '/')).toBe('/jails');
  });

  it('parses paths into pages and back', () => {
    expect(parseRoute('/')).toEqual({ name: 'dashboard' });
    expect(parseRoute('/jails/')).toEqual({ name: 'jails' });
    expect(parseRoute('/jails/nginx%2Dlimit')).toEqual({ name: 'jail', jail: 'nginx-limit' });
    expect(parseRoute('/servers/x')).toEqual({ name: 'not-found', path: '/servers/x' });
    expect(parseRoute('/protected')).toEqual({ name: 'protected' });
    expect(pathOf({ name: 'protected' })).toBe('/protected');
    expect(parseRoute('/nope')).toEqual({ name: 'not-found', path: '/nope' });
    expect(parseRoute('/feeds')).toEqual({ name: 'feeds' });
    expect(parseRoute('/feeds/edge')).toEqual({ name: 'not-found', path: '/feeds/edge' });
    expect(pathOf({ name: 'jail', jail: 'a b' })).toBe('/jails/a%20b');
    expect(parseRoute(pathOf({ name: 'jail', jail: 'a b' }))).toEqual({ name: 'jail', jail: 'a b' });
    expect(parseRoute('/sharing')).toEqual({ name: 'sharing' });
    expect(pathOf({ name: 'address', ip: '203.0.113.0/24' })).toBe('/addresses/203.0.113.0%2F24');
    expect(parseRoute(pathOf({ name: 'address', ip: '203.0.113.0/24' }))).toEqual({ name: 'address', ip: '203.0.113.0/24' });
    expect(parseRoute('/addresses')).toEqual({ name: 'not-found', path: '/addresses' });
  });

  it('only returns to app paths after login', () => {
    expect(safeReturnTo('/jails/sshd?x=1')).toBe('/jails/sshd?x=1');
    for (const bad of [null, '', 'https://evil.example/', '//evil.example/x', '/\\evil', '/login', '/login?return_to=/x', 'jails']) {
      expect(safeReturnTo(bad)).toBe('/');
    }
  });
});

describe('roles', () => {
  it('takes the strongest known role', () => {
    expect(strongestRole(['viewer', 'admin', 'operator'])).toBe('admin');
    expect(strongestRole(['Operator', 'nonsense'])).toBe('operator');
    expect(strongestRole([null, 'root'])).toBeNull();
  });

  it('lets each role do what the ones below it do', () => {
    expect(allows('viewer', 'ban')).toBe(false);
    expect(allows('operator', 'ban')).toBe(true);
    expect(allows('operator', 'manage-servers')).toBe(false);
    expect(allows('admin', 'manage-servers')).toBe(true);
    expect(allows('admin', 'ban')).toBe(true);
    expect(allows(null, 'ban')).toBe(false);
  });
});

describe('event filters', () => {
  it('round-trip through the page URL and become API parameters', () => {
    const f = filtersFromSearch('?jail=sshd&ip=+192.0.2.0/24+&kind=ban&unknown=1');
    expect(f.jail).toBe('sshd');
    expect(f.ip).toBe('192.0.2.0/24');
    expect(filtersToSearch(f).toString()).toBe('jail=sshd&ip=192.0.2.0%2F24&kind=ban');
    const q = filtersToQuery({ ...f, from: '2026-11-22T10:00' });
    expect(q.jail).toBe('sshd');
    expect(q.serverId).toBeUndefined();
    expect(q.from).toBe(new Date('2026-11-22T10:00').toISOString());
  });
});

const event = (id: number): Event => ({
  id,
  kind: 'ban',
  source: 'action',
  serverId: 's',
  occurredAt: '2026-11-22T10:00:00Z',
  storedAt: '2026-11-22T10:00:00Z',
  logs: [],
});

describe('live feed', () => {
  it('keeps the newest events first, each once, at most max', () => {
    let feed: Event[] = [];
    for (const id of [3, 1, 2, 3, 5]) feed = pushEvent(feed, event(id), 3);
    expect(feed.map((e) => e.id)).toEqual([5, 3, 2]);
  });

  it('ignores data that is not an event', () => {
    expect(parseEvent('{"id":7,"kind":"ban"}')?.id).toBe(7);
    expect(parseEvent('keep-alive')).toBeNull();
    expect(parseEvent('{"kind":"ban"}')).toBeNull();
  });
});

describe('server choice', () => {
  const s = (id: string, createdAt: string) => ({ id, createdAt }) as Server;
  it('keeps the remembered server, else takes the oldest', () => {
    const list = [s('b', '2026-02-01T00:00:00Z'), s('a', '2026-01-01T00:00:00Z')];
    expect(chooseServer(list, 'b')).toBe('b');
    expect(chooseServer(list, 'gone')).toBe('a');
    expect(chooseServer([], 'x')).toBe('');
  });
});

describe('duration', () => {
  it('reads like a person would say it', () => {
    expect(duration(600)).toBe('10 min');
    expect(duration(5400)).toBe('1 h 30 min');
    expect(duration(-1)).toBe('permanent');
    expect(duration(90061)).toBe('1 d 1 h 1 min');
    expect(duration(null)).toBe('—');
  });
});
