// Rollouts of a profile version (canary first, then batches, each host confirmed or rolled back):
// the API's types (from the hub's OpenAPI document), and the pure rules of the
// rollout page (the form's checks and body, the servers a profile is assigned to, the progress
// summary, and which badge each state wears). Words are message keys of the `rollouts` area.

import type { components } from './api/schema';

type S = components['schemas'];

export type RolloutState = S['RolloutState'];
export type HostState = S['HostState'];
export type CheckName = S['CheckName'];
/** One health check of a host while it is watched. */
export type RolloutCheck = S['CheckDto'];
/** One host of a rollout. Batch 0 is the canary. */
export type RolloutHost = S['RolloutHostDto'];
/** A rollout as listed (`GET /api/rollouts`). */
export type RolloutSummary = S['RolloutSummaryDto'];
/** A rollout with its hosts (`GET /api/rollouts/{id}`). */
export type Rollout = S['RolloutDto'];
export type RolloutList = S['RolloutListDto'];

/** `POST /api/rollouts`. Absent fields take the hub's defaults. */
export interface RolloutBody {
  profile: string;
  version: number;
  /** Absent: every server the profile is assigned to by label. */
  servers?: string[];
  canary?: number;
  batchSize?: number;
  watchSecs?: number;
  confirmSecs?: number;
  maxBanRateFactor?: number;
}

/** The hub's bounds and defaults of each field. */
export const LIMITS = {
  canary: { min: 1, default: 1 },
  batchSize: { min: 1, max: 100, default: 10 },
  watchSecs: { min: 0, max: 3600, default: 60 },
  confirmSecs: { min: 10, max: 3600, default: 120 },
  maxBanRateFactor: { min: 1, default: 3 },
} as const;

/** How many rollouts the page lists. */
export const LIST_LIMIT = 50;

/** A message key of the `rollouts` area and its placeholders. */
export interface Message {
  key: string;
  params?: Record<string, string | number>;
}

// ----- the form -----

/** What the form holds; a number input left empty is `null`. */
export interface RolloutForm {
  profile: string;
  version: number | null;
  /** `assigned`: every server the profile is assigned to; `chosen`: `servers`. */
  scope: 'assigned' | 'chosen';
  servers: string[];
  canary: number | null;
  batchSize: number | null;
  watchSecs: number | null;
  confirmSecs: number | null;
  maxBanRateFactor: number | null;
}

export function defaultForm(profile = '', version: number | null = null): RolloutForm {
  return {
    profile,
    version,
    scope: 'assigned',
    servers: [],
    canary: LIMITS.canary.default,
    batchSize: LIMITS.batchSize.default,
    watchSecs: LIMITS.watchSecs.default,
    confirmSecs: LIMITS.confirmSecs.default,
    maxBanRateFactor: LIMITS.maxBanRateFactor.default,
  };
}

/** The fields the form shows errors at, named as the API names them. */
export const FORM_FIELDS = [
  'profile',
  'version',
  'servers',
  'canary',
  'batchSize',
  'watchSecs',
  'confirmSecs',
  'maxBanRateFactor',
] as const;
export type FormField = (typeof FORM_FIELDS)[number];

function wholeIn(value: number | null, min: number, max?: number): Message | null {
  if (value === null || value === undefined || Number.isNaN(value)) return { key: 'rollouts.error.required' };
  if (!Number.isInteger(value)) return { key: 'rollouts.error.whole' };
  if (value < min || (max !== undefined && value > max)) {
    return max === undefined
      ? { key: 'rollouts.error.atLeast', params: { min } }
      : { key: 'rollouts.error.between', params: { min, max } };
  }
  return null;
}

/**
 * The form's refusals by field, the same rules the hub applies (so most mistakes are said before
 * anything is sent). `assigned` is how many servers the profile is assigned to by label. Empty: the
 * form may be sent.
 */
export function validateForm(form: RolloutForm, assigned: number): Partial<Record<FormField, Message>> {
  const errors: Partial<Record<FormField, Message>> = {};
  if (!form.profile.trim()) errors.profile = { key: 'rollouts.error.profile' };
  const version = wholeIn(form.version, 1);
  if (version) errors.version = version.key === 'rollouts.error.required' ? { key: 'rollouts.error.version' } : version;
  const servers = form.scope === 'chosen' ? form.servers.length : assigned;
  if (servers === 0) {
    errors.servers = { key: form.scope === 'chosen' ? 'rollouts.error.noneChosen' : 'rollouts.error.noneAssigned' };
  }
  const canary = wholeIn(form.canary, LIMITS.canary.min);
  if (canary) errors.canary = canary;
  else if (servers > 0 && (form.canary ?? 0) > servers) {
    errors.canary = { key: 'rollouts.error.canaryTooMany', params: { n: servers } };
  }
  const batch = wholeIn(form.batchSize, LIMITS.batchSize.min, LIMITS.batchSize.max);
  if (batch) errors.batchSize = batch;
  const watch = wholeIn(form.watchSecs, LIMITS.watchSecs.min, LIMITS.watchSecs.max);
  if (watch) errors.watchSecs = watch;
  const confirm = wholeIn(form.confirmSecs, LIMITS.confirmSecs.min, LIMITS.confirmSecs.max);
  if (confirm) errors.confirmSecs = confirm;
  // The agent undoes an unconfirmed change at its deadline, so the watch must end before it.
  else if (!watch && (form.watchSecs ?? 0) >= (form.confirmSecs ?? 0)) {
    errors.watchSecs = { key: 'rollouts.error.watchBeforeConfirm' };
  }
  const factor = form.maxBanRateFactor;
  if (factor === null || factor === undefined || Number.isNaN(factor)) {
    errors.maxBanRateFactor = { key: 'rollouts.error.required' };
  } else if (factor < LIMITS.maxBanRateFactor.min) {
    errors.maxBanRateFactor = { key: 'rollouts.error.atLeast', params: { min: LIMITS.maxBanRateFactor.min } };
  }
  return errors;
}

/** The request of a valid form: servers only when chosen, every other field as given. */
export function rolloutBody(form: RolloutForm): RolloutBody {
  return {
    profile: form.profile.trim(),
    version: form.version ?? 0,
    ...(form.scope === 'chosen' ? { servers: [...form.servers] } : {}),
    canary: form.canary ?? LIMITS.canary.default,
    batchSize: form.batchSize ?? LIMITS.batchSize.default,
    watchSecs: form.watchSecs ?? LIMITS.watchSecs.default,
    confirmSecs: form.confirmSecs ?? LIMITS.confirmSecs.default,
    maxBanRateFactor: form.maxBanRateFactor ?? LIMITS.maxBanRateFactor.default,
  };
}

/** The servers a profile's label selector picks: those carrying every label; none for no labels. */
export function assignedServers<S extends { labels: Record<string, string> }>(
  selector: Record<string, string>,
  servers: readonly S[],
): S[] {
  const wanted = Object.entries(selector);
  if (wanted.length === 0) return [];
  return servers.filter((s) => wanted.every(([k, v]) => s.labels[k] === v));
}

// ----- progress -----

const FINAL_HOST: ReadonlySet<HostState> = new Set(['confirmed', 'failed', 'rolledBack', 'skipped']);
const BUSY_HOST: ReadonlySet<HostState> = new Set(['applying', 'watching', 'rollingBack']);

/** Where a rollout stands, counted over its hosts. */
export interface Progress {
  total: number;
  confirmed: number;
  /** Failed or rolled back. */
  failed: number;
  skipped: number;
  /** Applying, watching or rolling back now. */
  busy: number;
  pending: number;
  /** Batches, the canary's included. */
  batches: number;
  /** The first batch with a host not yet settled; `null` when every host is. */
  currentBatch: number | null;
  /** Hosts settled, as a whole percentage of all. */
  percent: number;
}

export function progress(hosts: readonly RolloutHost[]): Progress {
  const total = hosts.length;
  const count = (test: (h: RolloutHost) => boolean) => hosts.filter(test).length;
  const unsettled = hosts.filter((h) => !FINAL_HOST.has(h.state)).map((h) => h.batch);
  const settled = total - unsettled.length;
  return {
    total,
    confirmed: count((h) => h.state === 'confirmed'),
    failed: count((h) => h.state === 'failed' || h.state === 'rolledBack'),
    skipped: count((h) => h.state === 'skipped'),
    busy: count((h) => BUSY_HOST.has(h.state)),
    pending: count((h) => h.state === 'pending'),
    batches: total === 0 ? 0 : Math.max(...hosts.map((h) => h.batch)) + 1,
    currentBatch: unsettled.length === 0 ? null : Math.min(...unsettled),
    percent: total === 0 ? 100 : Math.floor((100 * settled) / total),
  };
}

/** The one-line summary of a rollout's progress. */
export function progressText(p: Progress): Message {
  if (p.currentBatch === null) {
    return { key: 'rollouts.progress.settled', params: { confirmed: p.confirmed, total: p.total, failed: p.failed } };
  }
  return {
    key: p.currentBatch === 0 ? 'rollouts.progress.canary' : 'rollouts.progress.batch',
    params: { confirmed: p.confirmed, total: p.total, batch: p.currentBatch, batches: p.batches - 1 },
  };
}

/** Whether the page keeps asking: while the rollout runs, or a host of it is still busy (a stop's
 * rollbacks). */
export function shouldPoll(rollout: Pick<Rollout, 'state' | 'hosts'>): boolean {
  return rollout.state === 'running' || rollout.hosts.some((h) => BUSY_HOST.has(h.state));
}

/** The batch's name: the canary, or its number. */
export function batchLabel(batch: number): Message {
  return batch === 0 ? { key: 'rollouts.batch.canary' } : { key: 'rollouts.batch.number', params: { n: batch } };
}

// ----- badges -----

/** The badge of a state: its CSS class (the app's colours) and its word. */
export interface Badge {
  cls: 'online' | 'offline' | 'pending' | 'busy';
  key: string;
}

const HOST_CLASS: Record<HostState, Badge['cls']> = {
  pending: 'pending',
  applying: 'busy',
  watching: 'busy',
  confirmed: 'online',
  failed: 'offline',
  rollingBack: 'busy',
  rolledBack: 'offline',
  skipped: 'pending',
};

const ROLLOUT_CLASS: Record<RolloutState, Badge['cls']> = {
  running: 'busy',
  succeeded: 'online',
  stopped: 'pending',
  failed: 'offline',
  rolledBack: 'offline',
};

/** A host's badge; an unknown state (a newer hub) shows as itself, neutral. */
export function hostBadge(state: string): Badge {
  const cls = HOST_CLASS[state as HostState];
  return cls ? { cls, key: `rollouts.host.${state}` } : { cls: 'pending', key: state };
}

export function rolloutBadge(state: string): Badge {
  const cls = ROLLOUT_CLASS[state as RolloutState];
  return cls ? { cls, key: `rollouts.state.${state}` } : { cls: 'pending', key: state };
}

/** A check's name as words; an unknown check shows its own name. */
export function checkKey(name: string): string {
  return ['jailsRunning', 'noErrors', 'connected', 'banRate'].includes(name) ? `rollouts.check.${name}` : name;
}

/** The API path of a host's config change. */
export function changePath(host: Pick<RolloutHost, 'serverId' | 'changeId'>): string | null {
  if (!host.changeId) return null;
  return `api/servers/${encodeURIComponent(host.serverId)}/config-changes/${encodeURIComponent(host.changeId)}`;
}

/** What the page's query names: the rollout shown (`id`) and the profile the form starts from. */
export function rolloutQuery(search: string): { id?: string; profile?: string } {
  const params = new URLSearchParams(search);
  const id = params.get('id')?.trim();
  const profile = params.get('profile')?.trim();
  return { ...(id ? { id } : {}), ...(profile ? { profile } : {}) };
}
