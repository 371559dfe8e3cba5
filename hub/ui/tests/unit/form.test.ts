import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/lib/api/client';
import { errorId, fieldMatches, fieldMessage, unplacedError } from '../../src/lib/form';
import { FormState } from '../../src/lib/form.svelte';
import { warningOf } from '../../src/lib/protection';

const refusal = (field?: string, extra: Partial<ConstructorParameters<typeof ApiError>[0]> = {}) =>
  new ApiError({ status: 422, code: 'invalid', title: 'Invalid', detail: 'must be between 1 and 10', field, ...extra });

describe('form errors', () => {
  it('match their field and the fields under it, not a field that only starts alike', () => {
    expect(fieldMatches('name', 'name')).toBe(true);
    expect(fieldMatches('duration.steps', 'duration')).toBe(true);
    expect(fieldMatches('jails[1]', 'jails')).toBe(true);
    expect(fieldMatches('jailsExtra', 'jails')).toBe(false);
    expect(fieldMatches(undefined, 'name')).toBe(false);
  });

  it('show at their field only', () => {
    expect(fieldMessage(refusal('minBans'), 'minBans')).toBe('must be between 1 and 10');
    expect(fieldMessage(refusal('minBans'), 'minServers')).toBe('');
    expect(fieldMessage(new Error('boom'), 'minBans')).toBe('');
  });

  it('name the protecting entry of a lockout guard refusal', () => {
    const guarded = refusal('ip', {
      code: 'guard_protected_network',
      detail: 'is protected',
      protectedBy: { network: '192.0.2.0/24', kind: 'configured', note: 'office' },
    });
    expect(fieldMessage(guarded, 'ip')).toBe('is protected (protected by 192.0.2.0/24: office)');
    const named = refusal('ip', { detail: 'is inside 192.0.2.0/24', protectedBy: { network: '192.0.2.0/24', kind: 'configured', note: '' } });
    expect(fieldMessage(named, 'ip')).toBe('is inside 192.0.2.0/24');
  });

  it('go to the form box when no field of the form shows them', () => {
    const shown = refusal('jails[0]');
    expect(unplacedError(shown, ['name', 'jails'])).toBeNull();
    expect(unplacedError(refusal('policies'), ['name', 'jails'])).toBeInstanceOf(ApiError);
    expect(unplacedError(refusal(), ['name'])).toBeInstanceOf(ApiError);
    const network = new Error('offline');
    expect(unplacedError(network, ['name'])).toBe(network);
    expect(errorId('policy', 'duration.steps')).toBe('policy-duration-steps-error');
  });
});

describe('FormState', () => {
  it('is busy while it submits and keeps the refusal', async () => {
    const form = new FormState('feed', ['name']);
    let release: () => void = () => {};
    const pending = form.run(() => new Promise<void>((resolve) => (release = resolve)));
    expect(form.busy).toBe(true);
    release();
    expect(await pending).toBe(true);
    expect(form.busy).toBe(false);

    expect(await form.run(() => Promise.reject(refusal('name')))).toBe(false);
    expect(form.busy).toBe(false);
    expect(form.fieldError('name')).toBe('must be between 1 and 10');
    expect(form.invalid('name')).toBe('true');
    expect(form.describedBy('name')).toBe('feed-name-error');
    expect(form.invalid('description')).toBeUndefined();
    expect(form.unplaced).toBeNull();

    form.reset();
    expect(form.fieldError('name')).toBe('');
  });
});

describe('the protected check', () => {
  it('warns about the operator\'s own address and the protecting entry', () => {
    expect(warningOf({ ip: '203.0.113.7', coversYou: false })).toBe('');
    const both = warningOf({
      ip: '192.0.2.0/24',
      coversYou: true,
      yourAddress: '192.0.2.9',
      protectedBy: { network: '192.0.2.0/25', kind: 'configured', note: 'VPN' },
    });
    expect(both).toContain('covers your own address (192.0.2.9)');
    expect(both).toContain('protected network 192.0.2.0/25 (configured: VPN)');
  });
});
