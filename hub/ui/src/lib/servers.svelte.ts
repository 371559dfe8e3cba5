// The list of servers (refreshed in the background for their status) and the server the jail and
// filter pages talk to, sent as `X-BanDaemon-Server`.
import { describe, get } from './api/client';
import type { Server } from './api/types';

const KEY = 'banhub.server';

export const fleet = $state({
  servers: [] as Server[],
  loaded: false,
  error: '',
  /** The selected server's id; empty until there is one. */
  selected: '' as string,
});

function remembered(): string {
  try {
    return localStorage.getItem(KEY) ?? '';
  } catch {
    return '';
  }
}

/** Picks the remembered server if it still exists, else the oldest (the hub's default). */
export function chooseServer(servers: readonly Server[], wanted: string): string {
  if (servers.some((s) => s.id === wanted)) return wanted;
  const oldest = [...servers].sort((a, b) => a.createdAt.localeCompare(b.createdAt))[0];
  return oldest?.id ?? '';
}

export async function refreshServers(): Promise<void> {
  try {
    const servers = await get<Server[]>('api/servers');
    fleet.servers = servers;
    fleet.selected = chooseServer(servers, fleet.selected || remembered());
    fleet.error = '';
  } catch (error) {
    fleet.error = describe(error);
  } finally {
    fleet.loaded = true;
  }
}

export function selectServer(id: string): void {
  fleet.selected = id;
  try {
    localStorage.setItem(KEY, id);
  } catch {
    // Private windows may refuse storage; the choice then lasts for this page only.
  }
}

export function selectedServer(): Server | undefined {
  return fleet.servers.find((s) => s.id === fleet.selected);
}
