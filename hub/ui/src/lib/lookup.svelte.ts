// One lookup the hub makes for the UI on demand (whois/RDAP, AbuseIPDB): its answer, its error and
// a way to ask again, as reactive state a panel shows. The hub bounds the lookup's time, size and
// rate; a failure here is shown by the panel that asked and never holds up the rest of the page.
import { ApiError, get } from './api/client';
import { valueKey } from './values';
import { hasMessage, t } from './i18n.svelte';

/** What every lookup answer carries besides its own findings. */
export interface LookupAnswer {
  status: 'found' | 'notFound' | 'notPublic' | 'disabled';
  cached: boolean;
  fetchedAt?: string | null;
}

export class Lookup<T extends LookupAnswer> {
  result = $state<T | null>(null);
  error = $state<unknown>(null);

  constructor(private readonly path: string) {}

  /** Asks the hub (again), forgetting the previous answer or error. */
  async run(): Promise<void> {
    this.error = null;
    this.result = null;
    try {
      this.result = await get<T>(this.path);
    } catch (e) {
      this.error = e;
    }
  }
}

/** The heading of a failed lookup: what its problem code means (over its rate, out of time…), or a
 * general "lookup failed" for any other error. */
export function lookupErrorTitle(error: unknown): string {
  if (error instanceof ApiError) {
    const key = valueKey('lookupError', error.code);
    if (hasMessage(key)) return t(key);
  }
  return t('address.lookupFailed');
}
