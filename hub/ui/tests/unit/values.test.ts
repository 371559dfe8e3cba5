import { afterEach, describe, expect, it } from 'vitest';
import { setLocale, t } from '../../src/lib/i18n.svelte';
import { timedBanLines } from '../../src/lib/timedBans';
import { valueBadge, valueText } from '../../src/lib/values';
import type { TimedBan } from '../../src/lib/api/types';

afterEach(() => setLocale('en'));

describe('valueText', () => {
  it('names API values in the locale, one mapping per set', async () => {
    expect(valueText('serverStatus', 'online')).toBe('online');
    expect(valueText('auditOutcome', 'denied')).toBe('denied');
    await setLocale('de');
    expect(valueText('drift', 'drifted')).not.toBe('drifted');
    expect(valueText('auditOutcome', 'denied')).toBe('verweigert');
    expect(valueText('fileDrift', 'changed_outside_profile')).toBe('außerhalb des Profils geändert');
    expect(valueText('lookupError', 'lookup_timeout')).toBe('Der Dienst hat nicht rechtzeitig geantwortet');
  });

  it('shows a value it does not know as sent, and nothing as a dash', () => {
    expect(valueText('serverStatus', 'hibernating')).toBe('hibernating');
    expect(valueText('serverStatus', null)).toBe('—');
    expect(valueText('protection', 'hub_address')).toBe(t('protected.kindHub'));
    expect(valueText('protection', 'ignoreip')).toBe('ignoreip');
    expect(valueBadge('drift', 'in_sync')).toBe('online');
    expect(valueBadge('drift', 'sideways')).toBe('');
  });
});

describe('plurals', () => {
  it('say one server and two servers', async () => {
    expect(t('fleet.disable', { count: 1 })).toBe('Disable on 1 server');
    expect(t('fleet.disable', { count: 2 })).toBe('Disable on 2 servers');
    await setLocale('de');
    expect(t('fleet.disable', { count: 1 })).toBe('Auf 1 Server deaktivieren');
    expect(t('fleet.disable', { count: 2 })).toBe('Auf 2 Servern deaktivieren');
  });
});

describe('timedBanLines', () => {
  const ban = (serverId: string, fleetActionId: string | null, endsAt: string, state: TimedBan['state'] = 'active'): TimedBan => ({
    id: `${serverId}-${endsAt}`,
    serverId,
    jail: 'sshd',
    ip: '203.0.113.9',
    endsAt,
    state,
    requestedBy: 'alice',
    createdAt: '2026-11-27T10:00:00Z',
    attempts: 0,
    fleetActionId,
  });

  it('shows a fleet ban once with its servers, others on their own, ending first first', () => {
    const lines = timedBanLines([
      ban('a', 'f1', '2026-11-28T10:00:00Z'),
      ban('b', 'f1', '2026-11-28T10:00:00Z'),
      ban('a', null, '2026-11-27T11:00:00Z'),
      ban('b', null, '2026-11-27T12:00:00Z', 'lifted'),
    ]);
    expect(lines).toEqual([
      { fleetActionId: null, serverIds: ['a'], jail: 'sshd', endsAt: '2026-11-27T11:00:00Z' },
      { fleetActionId: 'f1', serverIds: ['a', 'b'], jail: 'sshd', endsAt: '2026-11-28T10:00:00Z' },
    ]);
  });
});
