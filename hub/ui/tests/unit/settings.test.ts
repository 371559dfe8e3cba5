import { describe, expect, it } from 'vitest';
import { errorSlot, FormError, fromForm, toForm } from '../../src/lib/settingsForm';

describe('settings form', () => {
  const doc = {
    version: 4,
    smtp: { host: 'mail.example.org', port: 587, tls: 'starttls' as const, username: 'hub', passwordSet: true, from: 'hub@example.org', timeoutSecs: 15 },
    alerts: { enabled: true, recipients: ['a@example.org', 'b@example.org'], digestWindowSecs: 60, maxAttempts: 5, retryInitialSecs: 30, rules: [], webhooks: [] },
    events: { retentionDays: null },
    geoip: { databasePath: null },
    fail2ban: { defaults: { bantime: 600, findtime: null, maxretry: 3, ignoreip: null, bantimeIncrement: null, bantimeMaxtime: null } },
    callbacks: { directEnabled: false, minSecretLength: 48, rotationOverlapSecs: 3600, maxAgeDays: 90 },
  };

  it('round-trips a document, keeping the stored password', () => {
    const back = fromForm(toForm(doc));
    expect(back.version).toBe(4);
    expect(back.smtp).toEqual({ host: 'mail.example.org', port: 587, tls: 'starttls', username: 'hub', from: 'hub@example.org', timeoutSecs: 15 });
    expect('password' in back.smtp!).toBe(false);
    expect(back.alerts?.recipients).toEqual(['a@example.org', 'b@example.org']);
    expect(back.fail2ban?.defaults).toEqual({ bantime: 600, findtime: null, maxretry: 3, ignoreip: null, bantimeIncrement: null, bantimeMaxtime: null });
  });

  it('keeps the callback policy instead of resetting it to the defaults', () => {
    expect(fromForm(toForm(doc)).callbacks).toEqual({ directEnabled: false, minSecretLength: 48, rotationOverlapSecs: 3600, maxAgeDays: 90 });
    const f = toForm({ ...doc, callbacks: undefined });
    expect(fromForm(f).callbacks).toEqual({ directEnabled: true, minSecretLength: 32, rotationOverlapSecs: 86400, maxAgeDays: null });
    f.secretMaxAgeDays = 'soon';
    expect(() => fromForm(f)).toThrow(FormError);
  });

  it('sends a new password, or null to remove it', () => {
    const f = toForm(doc);
    f.smtpPassword = 's3cret';
    expect(fromForm(f).smtp?.password).toBe('s3cret');
    f.smtpRemovePassword = true;
    expect(fromForm(f).smtp?.password).toBeNull();
  });

  it('turns off the mail server with null', () => {
    const f = toForm(doc);
    f.smtpEnabled = false;
    expect(fromForm(f).smtp).toBeNull();
  });

  it('names the field of a value it cannot send', () => {
    const f = toForm(doc);
    f.smtpPort = '58x';
    expect(() => fromForm(f)).toThrow(FormError);
    try {
      fromForm(f);
    } catch (e) {
      expect((e as FormError).field).toBe('smtp.port');
    }
    const g = toForm(doc);
    g.rulesJson = '{';
    expect(() => fromForm(g)).toThrow(/alerts.rules|valid JSON/);
  });

  it('puts nested errors on the list they belong to', () => {
    expect(errorSlot('alerts.rules[2].jails[0]')).toBe('alerts.rules');
    expect(errorSlot('alerts.recipients[1]')).toBe('alerts.recipients');
    expect(errorSlot('fail2ban.defaults.ignoreip[3]')).toBe('fail2ban.defaults.ignoreip');
    expect(errorSlot('smtp.host')).toBe('smtp.host');
    expect(errorSlot(undefined)).toBe('');
  });
});
