// What each role may do. The hub enforces this on every request; the UI only hides or disables the
// controls a role does not allow, so an operator is not offered buttons that would fail.

export type Role = 'viewer' | 'operator' | 'admin';

const RANK: Record<Role, number> = { viewer: 0, operator: 1, admin: 2 };

export type Capability =
  | 'ban' // ban and unban addresses
  | 'manage-jails' // enable/disable jails, edit configuration, reload/restart fail2ban
  | 'test-filters'
  | 'create-config' // create jails and filters, delete those banhub created
  | 'test-servers'
  | 'manage-servers' // add and delete servers, issue enrollment tokens
  | 'settings' // read and change the hub's settings, send a test e-mail
  | 'audit'; // read the audit log

const NEEDS: Record<Capability, Role> = {
  ban: 'operator',
  'manage-jails': 'operator',
  'test-filters': 'operator',
  'create-config': 'admin',
  'test-servers': 'operator',
  'manage-servers': 'admin',
  settings: 'admin',
  audit: 'admin',
};

/** The strongest role among those given; unknown names count as nothing. */
export function strongestRole(roles: readonly (string | null | undefined)[]): Role | null {
  let best: Role | null = null;
  for (const raw of roles) {
    const role = (raw ?? '').toLowerCase() as Role;
    if (!(role in RANK)) continue;
    if (best === null || RANK[role] > RANK[best]) best = role;
  }
  return best;
}

/** Whether `role` may do `capability`. No role may do nothing. */
export function allows(role: Role | null, capability: Capability): boolean {
  return role !== null && RANK[role] >= RANK[NEEDS[capability]];
}
