import { describe, expect, it } from 'vitest';
import { emptyRuleForm, ruleBody, ruleForm, scopeOf, scopeText, type RecidiveRule } from '../../src/lib/defence';

describe('recidive rule form', () => {
  it('reads label scopes and keeps empty text as every server', () => {
    expect(scopeOf('')).toEqual({ all: true });
    expect(scopeOf(' env=prod , role = web ')).toEqual({ labels: { env: 'prod', role: 'web' } });
    expect(scopeOf('oops')).toEqual({ labels: { oops: '' } });
    expect(scopeText({ all: true })).toBe('');
    expect(scopeText({ labels: { env: 'prod' } })).toBe('env=prod');
  });

  it('turns the form into the body the hub reads', () => {
    const form = { ...emptyRuleForm(), name: 'spread', jails: 'sshd, nginx*', ladder: '60, 600', minFailures: null };
    expect(ruleBody(form)).toEqual({
      name: 'spread',
      enabled: true,
      sources: { all: true },
      jails: ['sshd', 'nginx*'],
      minServers: 2,
      minFailures: null,
      windowSecs: 3600,
      targets: { all: true },
      ladderSecs: [60, 600],
      lookbackSecs: 604800,
      cooldownSecs: 300,
    });
    expect(ruleBody({ ...form, ladder: '60, soon' }).ladderSecs).toEqual([60, 0]);
  });

  it('round-trips a stored rule through the form', () => {
    const rule: RecidiveRule = {
      id: 3,
      name: 'r',
      enabled: false,
      sources: { labels: { env: 'prod' } },
      jails: ['ssh*'],
      minServers: null,
      minFailures: 12,
      windowSecs: 600,
      targets: { all: true },
      ladderSecs: [600, 7200],
      lookbackSecs: 86400,
      cooldownSecs: 0,
      createdAt: '2026-01-01T00:00:00Z',
      updatedAt: '2026-01-01T00:00:00Z',
    };
    const { id: _id, createdAt: _c, updatedAt: _u, ...spec } = rule;
    expect(ruleBody(ruleForm(rule))).toEqual({ ...spec, minServers: null });
  });
});
