// How the address page lists the timed bans that hold an address: a fleet ban once, with the
// servers it holds on; a ban on one server (from its jail page) on its own.
import type { TimedBan } from './api/types';

export interface TimedBanLine {
  /** The fleet ban it came with, none for a ban on one server. */
  fleetActionId: string | null;
  serverIds: string[];
  jail: string;
  endsAt: string;
}

/** The active bans of `bans` as lines, those ending first first. */
export function timedBanLines(bans: readonly TimedBan[]): TimedBanLine[] {
  const lines = new Map<string, TimedBanLine>();
  for (const b of bans) {
    if (b.state !== 'active') continue;
    const key = b.fleetActionId ? `${b.fleetActionId}/${b.jail}/${b.endsAt}` : b.id;
    const line = lines.get(key);
    if (line) line.serverIds.push(b.serverId);
    else lines.set(key, { fleetActionId: b.fleetActionId ?? null, serverIds: [b.serverId], jail: b.jail, endsAt: b.endsAt });
  }
  return [...lines.values()].sort((a, b) => Date.parse(a.endsAt) - Date.parse(b.endsAt) || a.serverIds[0].localeCompare(b.serverIds[0]));
}
