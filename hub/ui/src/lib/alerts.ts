// The alert forms' model: an alert rule and a webhook of the settings document (`alerts.rules[i]`,
// `alerts.webhooks[i]`) as plain form fields and back, the languages and formats alert messages
// come in, and where the hub's refusal of a rule or webhook belongs in its form.
import type { components } from './api/schema';
import { scopeOf, scopeText } from './defence';

type S = components['schemas'];

export type RuleDoc = S['RuleDocument'];
/** A webhook as read, and as written with its write-only URL and token. */
export type WebhookDoc = S['WebhookDocument'] & { url?: string | null; token?: string | null };
export type WebhookFormat = S['WebhookFormat'];
export type AlertLanguage = S['Language'];
export type MessageFormat = S['MessageFormat'];
export type AlertPreview = S['Preview'];
export type TestAlertResult = S['TestAlertResult'];

export const LANGUAGES: readonly AlertLanguage[] = ['en', 'de', 'fr', 'es', 'it', 'ja', 'zh'];
export const WEBHOOK_FORMATS: readonly WebhookFormat[] = ['json', 'slack', 'ntfy', 'ntfy-json'];
export const MESSAGE_FORMATS: readonly MessageFormat[] = ['email', 'json', 'slack', 'ntfy', 'ntfy-json'];

/** Each language by its own name, as a language picker shows it. */
export const LANGUAGE_NAMES: Record<AlertLanguage, string> = {
  en: 'English',
  de: 'Deutsch',
  fr: 'Français',
  es: 'Español',
  it: 'Italiano',
  ja: '日本語',
  zh: '中文',
};

/** One rule as the form edits it: lists as comma-separated text, numbers as typed. */
export interface RuleForm {
  id: string | null;
  name: string;
  enabled: boolean;
  servers: string[];
  /** The label selector as `role=web, site=fra`. */
  labels: string;
  jails: string;
  countries: string;
  repeatOffender: boolean;
  minBans: string;
  spike: boolean;
  spikeBans: string;
  spikeWindow: string;
  email: boolean;
  webhooks: string[];
}

export function ruleForm(rule?: RuleDoc): RuleForm {
  return {
    id: rule?.id ?? null,
    name: rule?.name ?? '',
    enabled: rule?.enabled ?? true,
    servers: [...(rule?.servers ?? [])],
    labels: scopeText({ labels: rule?.labels ?? {} }),
    jails: (rule?.jails ?? []).join(', '),
    countries: (rule?.countries ?? []).join(', '),
    repeatOffender: !!rule?.repeatOffender,
    minBans: String(rule?.repeatOffender?.minBans ?? 3),
    spike: !!rule?.spike,
    spikeBans: String(rule?.spike?.bans ?? 10),
    spikeWindow: String(rule?.spike?.windowSecs ?? 300),
    email: rule?.email ?? true,
    webhooks: [...(rule?.webhooks ?? [])],
  };
}

function list(text: string): string[] {
  return text
    .split(/[\n,]/)
    .map((s) => s.trim())
    .filter(Boolean);
}

/** A number as typed: whole numbers become numbers; anything else goes to the hub as it is, so
 * its refusal names the field. */
function number(text: string): number {
  const t = text.trim();
  return /^\d+$/.test(t) ? Number(t) : (t as unknown as number);
}

export function ruleDoc(f: RuleForm): RuleDoc {
  return {
    ...(f.id ? { id: f.id } : {}),
    name: f.name,
    enabled: f.enabled,
    servers: f.servers,
    labels: scopeOf(f.labels).labels ?? {},
    jails: list(f.jails),
    countries: list(f.countries),
    repeatOffender: f.repeatOffender ? { minBans: number(f.minBans) } : null,
    spike: f.spike ? { bans: number(f.spikeBans), windowSecs: number(f.spikeWindow) } : null,
    email: f.email,
    webhooks: f.webhooks,
  };
}

/** One webhook as the form edits it; the URL and token are write-only (empty keeps them). */
export interface WebhookForm {
  name: string;
  format: WebhookFormat;
  url: string;
  urlSet: boolean;
  urlHost: string;
  token: string;
  tokenSet: boolean;
  removeToken: boolean;
}

export function webhookForm(hook?: WebhookDoc): WebhookForm {
  return {
    name: hook?.name ?? '',
    format: hook?.format ?? 'json',
    url: '',
    urlSet: hook?.urlSet ?? false,
    urlHost: hook?.urlHost ?? '',
    token: '',
    tokenSet: hook?.tokenSet ?? false,
    removeToken: false,
  };
}

export function webhookDoc(f: WebhookForm): WebhookDoc {
  const doc: WebhookDoc = { name: f.name.trim(), format: f.format };
  if (f.url.trim()) doc.url = f.url.trim();
  if (f.removeToken) doc.token = null;
  else if (f.token) doc.token = f.token;
  return doc;
}

/** The settings' webhooks as they are posted back: secrets left out, so the stored ones stay. */
export function keptWebhooks(hooks: readonly WebhookDoc[]): WebhookDoc[] {
  return hooks.map((h) => ({ name: h.name, format: h.format }));
}

/** The field path of an API refusal inside `alerts.rules[index]` or `alerts.webhooks[index]`. */
export function itemField(list: 'rules' | 'webhooks', index: number, field: string): string {
  return `alerts.${list}[${index}].${field}`;
}
