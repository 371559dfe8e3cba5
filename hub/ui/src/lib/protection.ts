// The lockout guard's question before a ban: `GET /api/protected-networks/check` says whether an
// address covers a protected network or the operator's own address, and the form warns in words.
import { get } from './api/client';

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
    parts.push(`${check.ip} covers your own address (${check.yourAddress}): you could lock yourself out.`);
  }
  if (check.protectedBy) {
    const by = check.protectedBy;
    parts.push(
      `${check.ip} covers the protected network ${by.network} (${by.kind}${by.note ? `: ${by.note}` : ''}); the hub will refuse the ban.`,
    );
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
