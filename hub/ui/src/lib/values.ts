// The words for the codes the API sends (a server's status, an event's kind, a config change's
// state…): one mapping per set of values, each naming the message prefix whose keys translate it, so
// every page shows a value in the same words and badge colour. A value the UI does not know (a newer
// hub's) is shown as sent rather than as a message key.
import { hasMessage, t } from './i18n.svelte';

/** Each set of API values and the message prefix of its words (`nav.status.online`), or the key of
 * each value where the keys have no common prefix. */
const PREFIXES = {
  /** `StatusDto`: pending, reporting, online, offline. */
  serverStatus: 'nav.status',
  /** `Role`: viewer, operator, admin. */
  role: 'nav.role',
  /** `KindDto`: ban, unban, gap. */
  eventKind: 'common.kind',
  /** `SourceDto`: action, observed, direct. */
  eventSource: 'events.sourceShort',
  /** `TargetState`: one server's part of a fleet action. */
  targetState: 'fleetBan.state',
  /** `ChangeState`: a config change with its confirm deadline. */
  changeState: 'configChanges.state',
  /** `DriftStateDto`: a server against its profile. */
  drift: 'servers.driftState',
  /** `FileDriftDto`: one file of a drifted server. */
  fileDrift: 'profiles.fileDrift',
  /** `SharedBanStatus`. */
  sharedBan: 'sharing.status',
  /** `MessageFormat` / `WebhookFormat`. */
  messageFormat: 'alerts.format',
  /** `AddressScope`: public, private, loopback… */
  addressScope: 'address.scope',
  /** The problem codes of a failed whois or AbuseIPDB lookup. */
  lookupError: 'address.lookupError',
  /** `Outcome` of an audited request. */
  auditOutcome: 'audit.outcomeValue',
  /** Who made an audited request: session, token, bootstrap, anonymous. */
  actorKind: 'audit.actorKind',
  /** `TimedBanState`. */
  timedBan: 'timed.state',
  /** Why an address is protected from bans: `configured`, `hub_address`, `operator_session`. */
  protection: {
    configured: 'protected.kindConfigured',
    hub_address: 'protected.kindHub',
    operator_session: 'protected.kindOperator',
  },
} satisfies Record<string, string | Record<string, string>>;

export type ValueSet = keyof typeof PREFIXES;

/** The badge class of the values of a set that colours them (the rest are plain badges). */
const BADGES: Partial<Record<ValueSet, Record<string, string>>> = {
  drift: { in_sync: 'online', drifted: 'offline', unknown: 'pending' },
  changeState: { confirmed: 'enabled', awaiting_confirm: 'pending', applying: 'pending', reverted: 'disabled', failed: 'disabled' },
  auditOutcome: { ok: 'unban', success: 'unban', failed: 'ban', denied: 'ban' },
  serverStatus: { online: 'online', offline: 'offline', pending: 'pending', reporting: 'reporting' },
  eventKind: { ban: 'ban', unban: 'unban', gap: 'gap' },
};

/** The message key naming `value` of `set`. */
export function valueKey(set: ValueSet, value: string): string {
  const names: string | Record<string, string> = PREFIXES[set];
  return typeof names === 'string' ? `${names}.${value}` : (names[value] ?? `${set}.${value}`);
}

/** `value` of `set` in the current locale's words; as sent when no message names it, "—" for none. */
export function valueText(set: ValueSet, value: string | null | undefined): string {
  if (value === null || value === undefined || value === '') return '—';
  const key = valueKey(set, value);
  return hasMessage(key) ? t(key) : value;
}

/** The badge class `value` of `set` is drawn with (empty for an uncoloured one). */
export function valueBadge(set: ValueSet, value: string | null | undefined): string {
  return (value && BADGES[set]?.[value]) || '';
}
