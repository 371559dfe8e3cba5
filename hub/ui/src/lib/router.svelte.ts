// The current location as reactive state, and navigation with the History API. Links are plain
// <a href> elements with base-relative hrefs; a document-level click handler turns clicks on them
// into in-app navigation, so they also work with a middle click or "open in new tab".
import { parseRoute, stripBase, type Route } from './routes';

function basePathname(): string {
  return new URL(document.baseURI).pathname;
}

function current(): { path: string; search: string } {
  return { path: stripBase(location.pathname, basePathname()), search: location.search };
}

export const location$ = $state(current());

/** The route of the current location. */
export function currentRoute(): Route {
  return parseRoute(location$.path);
}

/** A base-relative href for an app path ("/jails/sshd" → "jails/sshd"). */
export function href(path: string): string {
  const rel = path.replace(/^\/+/, '');
  return rel === '' ? './' : rel;
}

/** Goes to an app path (with an optional query string). */
export function navigate(path: string, options: { replace?: boolean } = {}): void {
  const url = new URL(href(path), document.baseURI);
  if (options.replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  sync();
  if (!options.replace) window.scrollTo(0, 0);
}

/** Replaces the query string of the current page (filters and paging kept in the URL). */
export function setQuery(params: URLSearchParams): void {
  const qs = params.toString();
  const url = new URL(href(location$.path) + (qs ? `?${qs}` : ''), document.baseURI);
  history.replaceState(null, '', url);
  sync();
}

function sync(): void {
  const next = current();
  location$.path = next.path;
  location$.search = next.search;
}

/** Installs the popstate and link-click handlers; returns their removal. */
export function startRouter(): () => void {
  const onPop = () => sync();
  const onClick = (event: MouseEvent) => {
    if (event.defaultPrevented || event.button !== 0) return;
    if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    const anchor = (event.target as Element | null)?.closest?.('a[href]') as HTMLAnchorElement | null;
    if (!anchor || anchor.target || anchor.hasAttribute('download') || anchor.dataset.external !== undefined) return;
    const url = new URL(anchor.href);
    const base = new URL(document.baseURI);
    if (url.origin !== base.origin || !url.pathname.startsWith(base.pathname)) return;
    const path = stripBase(url.pathname, base.pathname);
    // The API and the login endpoints are the hub's, not pages of the app.
    if (/^\/(api|auth)(\/|$)/.test(path)) return;
    event.preventDefault();
    history.pushState(null, '', url);
    sync();
    window.scrollTo(0, 0);
  };
  window.addEventListener('popstate', onPop);
  document.addEventListener('click', onClick);
  return () => {
    window.removeEventListener('popstate', onPop);
    document.removeEventListener('click', onClick);
  };
}
