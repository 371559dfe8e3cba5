import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  assignedServers,
  batchLabel,
  changePath,
  checkKey,
  defaultForm,
  hostBadge,
  progress,
  progressText,
  rolloutBadge,
  rolloutBody,
  rolloutQuery,
  shouldPoll,
  validateForm,
  type HostState,
  type Message,
  type RolloutForm,
  type RolloutHost,
} from '../../src/lib/rollouts';
import { parseRoute, pathOf } from '../../src/lib/routes';

const locales = join(__dirname, '../../src/locales');
const catalog = (locale: string): Record<string, string> =>
  JSON.parse(readFileSync(join(locales, locale, 'rollouts.json'), 'utf8'));
const en = catalog('en');
/** A message key as `t()` gets it (`rollouts.x`) has its text in the English catalog. */
const known = (key: string) => key.startsWith('rollouts.') && key.slice('rollouts.'.length) in en;

function host(serverName: string, batch: number, state: HostState): RolloutHost {
  return { serverId: `id-${serverName}`, serverName, batch, state, checks: [], updatedAt: '2026-11-27T10:00:00Z' };
}

function form(overrides: Partial<RolloutForm> = {}): RolloutForm {
  return { ...defaultForm('web', 3), ...overrides };
}

describe('validateForm', () => {
  it('passes the defaults with servers assigned', () => {
    expect(validateForm(form(), 4)).toEqual({});
  });

  it('refuses each field out of the hub bounds, at its field', () => {
    const errors = validateForm(
      form({ profile: ' ', version: null, canary: 0, batchSize: 101, watchSecs: -1, confirmSecs: 9, maxBanRateFactor: 0.5 }),
      4,
    );
    expect(errors).toEqual({
      profile: { key: 'rollouts.error.profile' },
      version: { key: 'rollouts.error.version' },
      canary: { key: 'rollouts.error.atLeast', params: { min: 1 } },
      batchSize: { key: 'rollouts.error.between', params: { min: 1, max: 100 } },
      watchSecs: { key: 'rollouts.error.between', params: { min: 0, max: 3600 } },
      confirmSecs: { key: 'rollouts.error.between', params: { min: 10, max: 3600 } },
      maxBanRateFactor: { key: 'rollouts.error.atLeast', params: { min: 1 } },
    });
  });

  it('takes the edges of each range and a fractional factor', () => {
    expect(
      validateForm(form({ canary: 1, batchSize: 100, watchSecs: 0, confirmSecs: 3600, maxBanRateFactor: 1.5 }), 1),
    ).toEqual({});
    expect(validateForm(form({ batchSize: 1, watchSecs: 3599, confirmSecs: 3600, maxBanRateFactor: 1 }), 1)).toEqual({});
  });

  it("wants the watch to end before the agent's confirm deadline, as the hub does", () => {
    expect(validateForm(form({ watchSecs: 120, confirmSecs: 120 }), 1)).toEqual({
      watchSecs: { key: 'rollouts.error.watchBeforeConfirm' },
    });
    expect(validateForm(form({ watchSecs: 3600, confirmSecs: 10 }), 1).watchSecs?.key).toBe(
      'rollouts.error.watchBeforeConfirm',
    );
  });

  it('refuses fractions and empty inputs where whole numbers are needed', () => {
    const errors = validateForm(form({ batchSize: 2.5, watchSecs: null, maxBanRateFactor: null }), 3);
    expect(errors.batchSize).toEqual({ key: 'rollouts.error.whole' });
    expect(errors.watchSecs).toEqual({ key: 'rollouts.error.required' });
    expect(errors.maxBanRateFactor).toEqual({ key: 'rollouts.error.required' });
  });

  it('needs servers: assigned by label, or chosen', () => {
    expect(validateForm(form(), 0).servers).toEqual({ key: 'rollouts.error.noneAssigned' });
    expect(validateForm(form({ scope: 'chosen', servers: [] }), 5).servers).toEqual({ key: 'rollouts.error.noneChosen' });
    expect(validateForm(form({ scope: 'chosen', servers: ['a'] }), 0)).toEqual({});
  });

  it('refuses a canary larger than the servers it goes to', () => {
    expect(validateForm(form({ canary: 3 }), 2).canary).toEqual({
      key: 'rollouts.error.canaryTooMany',
      params: { n: 2 },
    });
    expect(validateForm(form({ canary: 2 }), 2)).toEqual({});
  });

  it('says every refusal in words the catalog has', () => {
    const all = [
      validateForm(form({ profile: '', version: null, canary: null, batchSize: 0.5, maxBanRateFactor: 0 }), 0),
      validateForm(form({ scope: 'chosen', canary: 9, batchSize: 0 }), 0),
      validateForm(form({ canary: 9 }), 2),
    ].flatMap((e) => Object.values(e) as Message[]);
    for (const message of all) expect(known(message.key), message.key).toBe(true);
  });
});

describe('rolloutBody', () => {
  it('leaves the servers out when the profile assignment picks them', () => {
    expect(rolloutBody(form({ servers: ['x'] }))).toEqual({
      profile: 'web',
      version: 3,
      canary: 1,
      batchSize: 10,
      watchSecs: 60,
      confirmSecs: 120,
      maxBanRateFactor: 3,
    });
  });

  it('sends the chosen servers and the values given', () => {
    const body = rolloutBody(
      form({ profile: ' web ', scope: 'chosen', servers: ['a', 'b'], canary: 2, batchSize: 5, watchSecs: 0, confirmSecs: 30, maxBanRateFactor: 1.5 }),
    );
    expect(body).toEqual({
      profile: 'web',
      version: 3,
      servers: ['a', 'b'],
      canary: 2,
      batchSize: 5,
      watchSecs: 0,
      confirmSecs: 30,
      maxBanRateFactor: 1.5,
    });
  });
});

describe('assignedServers', () => {
  const servers: { id: string; labels: Record<string, string> }[] = [
    { id: '1', labels: { role: 'web', dc: 'a' } },
    { id: '2', labels: { role: 'web', dc: 'b' } },
    { id: '3', labels: { role: 'db' } },
  ];

  it('picks the servers carrying every label', () => {
    expect(assignedServers({ role: 'web' }, servers).map((s) => s.id)).toEqual(['1', '2']);
    expect(assignedServers({ role: 'web', dc: 'b' }, servers).map((s) => s.id)).toEqual(['2']);
  });

  it('picks none for a profile without labels', () => {
    expect(assignedServers({}, servers)).toEqual([]);
  });
});

describe('progress', () => {
  it('counts the hosts and finds the first batch not settled', () => {
    const p = progress([
      host('a', 0, 'confirmed'),
      host('b', 1, 'watching'),
      host('c', 1, 'confirmed'),
      host('d', 2, 'pending'),
      host('e', 2, 'pending'),
    ]);
    expect(p).toEqual({
      total: 5,
      confirmed: 2,
      failed: 0,
      skipped: 0,
      busy: 1,
      pending: 2,
      batches: 3,
      currentBatch: 1,
      percent: 40,
    });
    expect(progressText(p)).toEqual({
      key: 'rollouts.progress.batch',
      params: { confirmed: 2, total: 5, batch: 1, batches: 2 },
    });
  });

  it('speaks of the canary while it is watched', () => {
    const p = progress([host('a', 0, 'applying'), host('b', 1, 'pending')]);
    expect(p.currentBatch).toBe(0);
    expect(progressText(p).key).toBe('rollouts.progress.canary');
  });

  it('counts failed and rolled-back hosts together, and is settled when no host waits', () => {
    const p = progress([host('a', 0, 'failed'), host('b', 1, 'rolledBack'), host('c', 1, 'skipped')]);
    expect(p).toMatchObject({ failed: 2, skipped: 1, currentBatch: null, percent: 100 });
    expect(progressText(p)).toEqual({
      key: 'rollouts.progress.settled',
      params: { confirmed: 0, total: 3, failed: 2 },
    });
  });

  it('reads an empty rollout as settled', () => {
    expect(progress([])).toMatchObject({ total: 0, batches: 0, currentBatch: null, percent: 100 });
  });
});

describe('shouldPoll', () => {
  it('polls while running, and after a stop until every rollback is done', () => {
    expect(shouldPoll({ state: 'running', hosts: [host('a', 0, 'confirmed')] })).toBe(true);
    expect(shouldPoll({ state: 'stopped', hosts: [host('a', 0, 'rollingBack')] })).toBe(true);
    expect(shouldPoll({ state: 'stopped', hosts: [host('a', 0, 'rolledBack')] })).toBe(false);
    expect(shouldPoll({ state: 'succeeded', hosts: [host('a', 0, 'confirmed')] })).toBe(false);
  });
});

describe('badges', () => {
  it('colours each host state', () => {
    expect(hostBadge('confirmed')).toEqual({ cls: 'online', key: 'rollouts.host.confirmed' });
    expect(hostBadge('failed').cls).toBe('offline');
    expect(hostBadge('rolledBack').cls).toBe('offline');
    expect(hostBadge('watching').cls).toBe('busy');
    expect(hostBadge('rollingBack').cls).toBe('busy');
    expect(hostBadge('pending').cls).toBe('pending');
    expect(hostBadge('skipped').cls).toBe('pending');
  });

  it('colours each rollout state', () => {
    expect(rolloutBadge('running')).toEqual({ cls: 'busy', key: 'rollouts.state.running' });
    expect(rolloutBadge('succeeded').cls).toBe('online');
    expect(rolloutBadge('failed').cls).toBe('offline');
    expect(rolloutBadge('rolledBack').cls).toBe('offline');
    expect(rolloutBadge('stopped').cls).toBe('pending');
  });

  it('shows a state it does not know as itself', () => {
    expect(hostBadge('paused')).toEqual({ cls: 'pending', key: 'paused' });
    expect(rolloutBadge('queued')).toEqual({ cls: 'pending', key: 'queued' });
    expect(checkKey('diskSpace')).toBe('diskSpace');
  });

  it('has words for every state, check and batch', () => {
    const hosts: HostState[] = ['pending', 'applying', 'watching', 'confirmed', 'failed', 'rollingBack', 'rolledBack', 'skipped'];
    const keys = [
      ...hosts.map((s) => hostBadge(s).key),
      ...['running', 'succeeded', 'stopped', 'failed', 'rolledBack'].map((s) => rolloutBadge(s).key),
      ...['jailsRunning', 'noErrors', 'connected', 'banRate'].map(checkKey),
      batchLabel(0).key,
      batchLabel(2).key,
    ];
    for (const key of keys) expect(known(key), key).toBe(true);
  });
});

describe('changePath', () => {
  it('links the host config change, or nothing before there is one', () => {
    expect(changePath({ serverId: 'a b', changeId: 'c/1' })).toBe('api/servers/a%20b/config-changes/c%2F1');
    expect(changePath({ serverId: 'a', changeId: null })).toBeNull();
  });
});

describe('the rollouts catalogs', () => {
  it('hold the same keys and placeholders in every locale', () => {
    const placeholders = (text: string) => [...text.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
    const others = readdirSync(locales).filter((l) => l !== 'en' && existsSync(join(locales, l, 'rollouts.json')));
    expect(others.sort()).toEqual(expect.arrayContaining(['de', 'es', 'fr', 'it', 'ja', 'zh']));
    for (const locale of others) {
      const messages = catalog(locale);
      expect(Object.keys(messages).sort(), locale).toEqual(Object.keys(en).sort());
      for (const [key, text] of Object.entries(en)) {
        expect(placeholders(messages[key]), `${locale} ${key}`).toEqual(placeholders(text));
      }
    }
  });
});

describe('the rollouts route', () => {
  it('has its own page at /rollouts', () => {
    expect(parseRoute('/rollouts')).toEqual({ name: 'rollouts' });
    expect(parseRoute('/rollouts/x')).toEqual({ name: 'not-found', path: '/rollouts/x' });
    expect(pathOf({ name: 'rollouts' })).toBe('/rollouts');
  });
});

describe('rolloutQuery', () => {
  it('reads the rollout shown and the profile to start from, and leaves out blanks', () => {
    expect(rolloutQuery('?id=r-1&profile=web')).toEqual({ id: 'r-1', profile: 'web' });
    expect(rolloutQuery('?id=&profile=%20')).toEqual({});
    expect(rolloutQuery('')).toEqual({});
  });
});
