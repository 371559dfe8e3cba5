// Fleet defence in the UI: the shapes of recidive rules and paused sources as the hub sends them,
// and the recidive rule form (text fields) turned into the body the hub reads and back.

/** Servers named by `all: true` or by labels. */
export interface Scope {
  all?: boolean;
  labels?: Record<string, string>;
}

/** A recidive rule as `GET /api/sharing/recidive` lists it. */
export interface RecidiveRule {
  id: number;
  name: string;
  enabled: boolean;
  sources: Scope;
  jails: string[];
  minServers?: number | null;
  minFailures?: number | null;
  windowSecs: number;
  targets: Scope;
  ladderSecs: number[];
  lookbackSecs: number;
  cooldownSecs: number;
  createdAt: string;
  updatedAt: string;
}

/** A source server whose sharing the storm breaker paused. */
export interface Pause {
  server: string;
  pausedAt: string;
  sharedBans: number;
  reason: string;
  resumedAt?: string | null;
  resumedBy?: string | null;
}

/** The rule form: lists as comma-separated text, numbers as the inputs hold them. */
export interface RuleForm {
  name: string;
  enabled: boolean;
  sources: string;
  jails: string;
  minServers: number | null;
  minFailures: number | null;
  windowSecs: number | null;
  targets: string;
  ladder: string;
  lookbackSecs: number | null;
  cooldownSecs: number | null;
}

export function emptyRuleForm(): RuleForm {
  return {
    name: '',
    enabled: true,
    sources: '',
    jails: '',
    minServers: 2,
    minFailures: null,
    windowSecs: 3600,
    targets: '',
    ladder: '3600, 86400, 604800',
    lookbackSecs: 604800,
    cooldownSecs: 300,
  };
}

function list(text: string): string[] {
  return text
    .split(',')
    .map((part) => part.trim())
    .filter((part) => part.length > 0);
}

/** `env=prod, role=web` as a scope; empty text is every server. Text without `=` is kept as a
 * key with an empty value, for the hub to refuse by name. */
export function scopeOf(text: string): Scope {
  const pairs = list(text);
  if (pairs.length === 0) return { all: true };
  const labels: Record<string, string> = {};
  for (const pair of pairs) {
    const at = pair.indexOf('=');
    if (at < 0) labels[pair] = '';
    else labels[pair.slice(0, at).trim()] = pair.slice(at + 1).trim();
  }
  return { labels };
}

export function scopeText(scope: Scope): string {
  if (scope.all) return '';
  return Object.entries(scope.labels ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(', ');
}

/** A number input's value, or `null` when left empty. */
function numberOrNull(value: number | null | undefined): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/** The body of a create or replace request. A ladder step that is not a whole number is sent as 0,
 * which the hub refuses naming `ladderSecs`. */
export function ruleBody(form: RuleForm): Record<string, unknown> {
  return {
    name: form.name,
    enabled: form.enabled,
    sources: scopeOf(form.sources),
    jails: list(form.jails),
    minServers: numberOrNull(form.minServers),
    minFailures: numberOrNull(form.minFailures),
    windowSecs: numberOrNull(form.windowSecs) ?? 0,
    targets: scopeOf(form.targets),
    ladderSecs: list(form.ladder).map((step) => (/^\d+$/.test(step) ? Number(step) : 0)),
    lookbackSecs: numberOrNull(form.lookbackSecs) ?? 0,
    cooldownSecs: numberOrNull(form.cooldownSecs) ?? 0,
  };
}

/** The form of an existing rule. */
export function ruleForm(rule: RecidiveRule): RuleForm {
  return {
    name: rule.name,
    enabled: rule.enabled,
    sources: scopeText(rule.sources),
    jails: rule.jails.join(', '),
    minServers: rule.minServers ?? null,
    minFailures: rule.minFailures ?? null,
    windowSecs: rule.windowSecs,
    targets: scopeText(rule.targets),
    ladder: rule.ladderSecs.join(', '),
    lookbackSecs: rule.lookbackSecs,
    cooldownSecs: rule.cooldownSecs,
  };
}
