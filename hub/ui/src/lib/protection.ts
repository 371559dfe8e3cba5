// The lockout guard's question before a ban: `GET /api/protected-networks/check` says whether an
// address covers a protected network or the operator's own address, and the form warns in words.
import { get } from './api/client';
import { t } from './i18n.svelte';

/** What `GET /api/protected-networks/check` answers. */
export interface ProtectedCheck {
  ip: string;
  protectedBy?: { network: string; kind: string; note: string } | null;
  yourAddress?: string | null;
  coversYou: boolean;
}

/** The warning a ban form shows for `check`, '' when there is nothing to warn about. */
export function warningOf(check: ProtectedCheck): string {
  const parts: string[] = [];
  if (check.coversYou) {
    parts.push(t('protected.coversYou', { ip: check.ip, yours: check.yourAddress }));
  }
  if (check.protectedBy) {
    const by = check.protectedBy;
    const what = by.note ? `${by.kind}: ${by.note}` : by.kind;
    parts.push(t('protected.coversNetwork', { ip: check.ip, network: by.network, what }));
  }
  return parts.join(' ');
}

/** Asks the hub about `ip` and returns the warning, '' when none. An address the check cannot read
 * is left to the ban itself to refuse at its field. */
export async function protectionWarning(ip: string): Promise<string> {
  try {
    return warningOf(await get<ProtectedCheck>('api/protected-networks/check', { query: { ip } }));
  } catch {
    return '';
  }
}
