// How the address page lists the timed bans that hold an address: one line per fleet ban that
// reached every server with the same end (the fleet as a whole), one per server otherwise.
import type { TimedBan } from './api/types';

export interface TimedBanLine {
  /** The server's id, or none for a fleet ban that holds on every server. */
  serverId: string | null;
  jail: string;
  endsAt: string;
}

/**
 * The active bans of `bans` as lines, those ending first first: a fleet ban whose servers are all of
 * `fleetSize` servers, with one end and one jail, is one line for the fleet.
 */
export function timedBanLines(bans: readonly TimedBan[], fleetSize: number): TimedBanLine[] {
  const active = bans.filter((b) => b.state === 'active');
  const groups = new Map<string, TimedBan[]>();
  const lines: TimedBanLine[] = [];
  for (const b of active) {
    if (!b.fleetActionId) {
      lines.push({ serverId: b.serverId, jail: b.jail, endsAt: b.endsAt });
      continue;
    }
    const key = `${b.fleetActionId}/${b.jail}/${b.endsAt}`;
    groups.set(key, [...(groups.get(key) ?? []), b]);
  }
  for (const group of groups.values()) {
    const servers = new Set(group.map((b) => b.serverId));
    if (fleetSize > 1 && servers.size >= fleetSize) {
      lines.push({ serverId: null, jail: group[0].jail, endsAt: group[0].endsAt });
    } else {
      for (const b of group) lines.push({ serverId: b.serverId, jail: b.jail, endsAt: b.endsAt });
    }
  }
  return lines.sort((a, b) => Date.parse(a.endsAt) - Date.parse(b.endsAt) || (a.serverId ?? '').localeCompare(b.serverId ?? ''));
}
