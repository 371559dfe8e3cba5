// The page component of each route, loaded on demand: each page is a chunk of its own (with what only
// it uses, such as uPlot for the chart pages), fetched the first time its route is shown and kept.
import type { Component } from 'svelte';
import type { Route } from './routes';

/** A route that shows a page of the app (the shell draws login and not-found itself). */
export type PageName = Exclude<Route['name'], 'login' | 'not-found'>;

// A page takes its route's parameters as props (`jail`, `ip`) or none.
type Page = Component<any>;

const LOADERS: Record<PageName, () => Promise<{ default: Page }>> = {
  dashboard: () => import('../pages/Dashboard.svelte'),
  servers: () => import('../pages/Servers.svelte'),
  jails: () => import('../pages/Jails.svelte'),
  jail: () => import('../pages/Jail.svelte'),
  'fleet-jails': () => import('../pages/FleetJails.svelte'),
  events: () => import('../pages/Events.svelte'),
  insights: () => import('../pages/Insights.svelte'),
  filters: () => import('../pages/Filters.svelte'),
  settings: () => import('../pages/Settings.svelte'),
  audit: () => import('../pages/Audit.svelte'),
  protected: () => import('../pages/Protected.svelte'),
  feeds: () => import('../pages/Feeds.svelte'),
  sharing: () => import('../pages/Sharing.svelte'),
  address: () => import('../pages/Address.svelte'),
  defence: () => import('../pages/Defence.svelte'),
  profiles: () => import('../pages/Profiles.svelte'),
  rollouts: () => import('../pages/Rollouts.svelte'),
};

const loaded = new Map<PageName, Page>();

/** Whether a route shows a page of the app. */
export function isPage(name: Route['name']): name is PageName {
  return name in LOADERS;
}

/** The page of `name` once it has been loaded, so a page shown before draws without waiting. */
export function loadedPage(name: PageName): Page | undefined {
  return loaded.get(name);
}

/** Fetches the page of `name` (once) and returns its component. */
export async function loadPage(name: PageName): Promise<Page> {
  const page = loaded.get(name) ?? (await LOADERS[name]()).default;
  loaded.set(name, page);
  return page;
}

/** The props a route hands its page. */
export function pageProps(route: Route): Record<string, string> {
  if (route.name === 'jail') return { jail: route.jail };
  if (route.name === 'address') return { ip: route.ip };
  return {};
}
