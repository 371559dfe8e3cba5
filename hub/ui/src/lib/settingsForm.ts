// The settings page's form model: the settings document as the API reads it (GET /api/settings),
// turned into plain form fields and back into the document to POST. Secrets are write-only: an
// empty password field keeps the stored one, "remove" sends null.
import type { AlertLanguage, RuleDoc, WebhookDoc } from './alerts';


import { t } from './i18n.svelte';
export interface SettingsDoc {
  version?: number;
  updatedAt?: string;
  smtp?: SmtpDoc | null;
  alerts?: AlertsDoc;
  events?: { retentionDays?: number | null };
  geoip?: { databasePath?: string | null };
  fail2ban?: { defaults?: DefaultsDoc };
  callbacks?: CallbacksDoc;
}

/** The callback secret policy for hosts without an agent. */
export interface CallbacksDoc {
  directEnabled?: boolean;
  minSecretLength?: number;
  rotationOverlapSecs?: number;
  maxAgeDays?: number | null;
}

export interface SmtpDoc {
  host: string;
  port?: number;
  tls?: 'none' | 'starttls' | 'tls';
  username?: string | null;
  password?: string | null;
  passwordSet?: boolean;
  from: string;
  timeoutSecs?: number;
}

export interface AlertsDoc {
  enabled?: boolean;
  recipients?: string[];
  digestWindowSecs?: number;
  maxAttempts?: number;
  retryInitialSecs?: number;
  rules?: RuleDoc[];
  webhooks?: WebhookDoc[];
  language?: AlertLanguage;
}

export interface DefaultsDoc {
  bantime?: number | null;
  findtime?: number | null;
  maxretry?: number | null;
  ignoreip?: string[] | null;
  bantimeIncrement?: boolean | null;
  bantimeMaxtime?: number | null;
}

export interface SettingsForm {
  version: number | undefined;
  smtpEnabled: boolean;
  smtpHost: string;
  smtpPort: string;
  smtpTls: 'none' | 'starttls' | 'tls';
  smtpUsername: string;
  smtpPassword: string;
  smtpPasswordSet: boolean;
  smtpRemovePassword: boolean;
  smtpFrom: string;
  smtpTimeout: string;
  alertsEnabled: boolean;
  recipients: string;
  digestWindow: string;
  maxAttempts: string;
  retryInitial: string;
  rulesJson: string;
  webhooksJson: string;
  alertsLanguage: AlertLanguage;
  retentionDays: string;
  geoipPath: string;
  bantime: string;
  findtime: string;
  maxretry: string;
  ignoreip: string;
  bantimeIncrement: '' | 'true' | 'false';
  bantimeMaxtime: string;
  directCallbacks: boolean;
  minSecretLength: string;
  rotationOverlap: string;
  secretMaxAgeDays: string;
}

const str = (v: number | string | null | undefined) => (v === null || v === undefined ? '' : String(v));

export function toForm(doc: SettingsDoc): SettingsForm {
  const smtp = doc.smtp ?? null;
  const alerts = doc.alerts ?? {};
  const d = doc.fail2ban?.defaults ?? {};
  const cb = doc.callbacks ?? {};
  return {
    version: doc.version,
    smtpEnabled: smtp !== null,
    smtpHost: smtp?.host ?? '',
    smtpPort: str(smtp?.port ?? 587),
    smtpTls: smtp?.tls ?? 'starttls',
    smtpUsername: smtp?.username ?? '',
    smtpPassword: '',
    smtpPasswordSet: smtp?.passwordSet ?? false,
    smtpRemovePassword: false,
    smtpFrom: smtp?.from ?? '',
    smtpTimeout: str(smtp?.timeoutSecs ?? 15),
    alertsEnabled: alerts.enabled ?? true,
    recipients: (alerts.recipients ?? []).join('\n'),
    digestWindow: str(alerts.digestWindowSecs ?? 60),
    maxAttempts: str(alerts.maxAttempts ?? 5),
    retryInitial: str(alerts.retryInitialSecs ?? 30),
    rulesJson: JSON.stringify(alerts.rules ?? [], null, 2),
    webhooksJson: JSON.stringify(alerts.webhooks ?? [], null, 2),
    alertsLanguage: alerts.language ?? 'en',
    retentionDays: str(doc.events?.retentionDays),
    geoipPath: doc.geoip?.databasePath ?? '',
    bantime: str(d.bantime),
    findtime: str(d.findtime),
    maxretry: str(d.maxretry),
    ignoreip: (d.ignoreip ?? []).join('\n'),
    bantimeIncrement: d.bantimeIncrement === true ? 'true' : d.bantimeIncrement === false ? 'false' : '',
    bantimeMaxtime: str(d.bantimeMaxtime),
    directCallbacks: cb.directEnabled ?? true,
    minSecretLength: str(cb.minSecretLength ?? 32),
    rotationOverlap: str(cb.rotationOverlapSecs ?? 86400),
    secretMaxAgeDays: str(cb.maxAgeDays),
  };
}

/** A form value the browser could not turn into the document: the field it belongs to and why. */
export class FormError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}

function int(field: string, text: string): number | null {
  const trimmed = text.trim();
  if (trimmed === '') return null;
  if (!/^-?\d+$/.test(trimmed)) throw new FormError(field, t('settings.wholeNumber'));
  return Number(trimmed);
}

function required(field: string, text: string): number {
  const n = int(field, text);
  if (n === null) throw new FormError(field, t('settings.required'));
  return n;
}

function list(text: string): string[] {
  return text
    .split(/[\n,]/)
    .map((s) => s.trim())
    .filter(Boolean);
}

function json(field: string, text: string): unknown[] {
  let value: unknown;
  try {
    value = JSON.parse(text.trim() || '[]');
  } catch (e) {
    throw new FormError(field, t('settings.invalidJson', { error: (e as Error).message }));
  }
  if (!Array.isArray(value)) throw new FormError(field, t('settings.jsonList'));
  return value;
}

/** The document to POST. Field names in errors are the API's (`smtp.port`), so one map shows both. */
export function fromForm(f: SettingsForm): SettingsDoc {
  let smtp: SmtpDoc | null = null;
  if (f.smtpEnabled) {
    smtp = {
      host: f.smtpHost.trim(),
      port: required('smtp.port', f.smtpPort),
      tls: f.smtpTls,
      username: f.smtpUsername.trim() || null,
      from: f.smtpFrom.trim(),
      timeoutSecs: required('smtp.timeoutSecs', f.smtpTimeout),
    };
    if (f.smtpRemovePassword) smtp.password = null;
    else if (f.smtpPassword !== '') smtp.password = f.smtpPassword;
  }
  const bantimeIncrement = f.bantimeIncrement === '' ? null : f.bantimeIncrement === 'true';
  const ignoreip = list(f.ignoreip);
  return {
    version: f.version,
    smtp,
    alerts: {
      enabled: f.alertsEnabled,
      recipients: list(f.recipients),
      digestWindowSecs: required('alerts.digestWindowSecs', f.digestWindow),
      maxAttempts: required('alerts.maxAttempts', f.maxAttempts),
      retryInitialSecs: required('alerts.retryInitialSecs', f.retryInitial),
      rules: json('alerts.rules', f.rulesJson) as RuleDoc[],
      webhooks: json('alerts.webhooks', f.webhooksJson) as WebhookDoc[],
      language: f.alertsLanguage,
    },
    events: { retentionDays: int('events.retentionDays', f.retentionDays) },
    geoip: { databasePath: f.geoipPath.trim() || null },
    fail2ban: {
      defaults: {
        bantime: int('fail2ban.defaults.bantime', f.bantime),
        findtime: int('fail2ban.defaults.findtime', f.findtime),
        maxretry: int('fail2ban.defaults.maxretry', f.maxretry),
        ignoreip: ignoreip.length ? ignoreip : null,
        bantimeIncrement,
        bantimeMaxtime: int('fail2ban.defaults.bantimeMaxtime', f.bantimeMaxtime),
      },
    },
    // Always sent: a section left out of the document would be reset to its defaults.
    callbacks: {
      directEnabled: f.directCallbacks,
      minSecretLength: required('callbacks.minSecretLength', f.minSecretLength),
      rotationOverlapSecs: required('callbacks.rotationOverlapSecs', f.rotationOverlap),
      maxAgeDays: int('callbacks.maxAgeDays', f.secretMaxAgeDays),
    },
  };
}

/**
 * Which form section shows an error for the API's field path: the field itself when the form has
 * it, else the closest list it belongs to (`alerts.rules[2].jails[0]` → `alerts.rules`).
 */
export function errorSlot(field: string | undefined): string {
  if (!field) return '';
  const m = /^(alerts\.(?:rules|webhooks|recipients)|fail2ban\.defaults\.ignoreip)(?:\[|$)/.exec(field);
  if (m) return m[1];
  return field;
}
