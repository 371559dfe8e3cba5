// The UI's pages and their paths. Paths are app-relative ("/jails/sshd"); the page's <base href>
// says where the app lives, so the same build works at "/" and under a reverse proxy's sub-path.

export type Route =
  | { name: 'dashboard' }
  | { name: 'servers' }
  | { name: 'jails' }
  | { name: 'jail'; jail: string }
  | { name: 'fleet-jails' }
  | { name: 'events' }
  | { name: 'insights' }
  | { name: 'filters' }
  | { name: 'settings' }
  | { name: 'audit' }
  | { name: 'protected' }
  | { name: 'feeds' }
  | { name: 'sharing' }
  | { name: 'address'; ip: string }
  | { name: 'defence' }
  | { name: 'profiles' }
  | { name: 'rollouts' }
  | { name: 'login' }
  | { name: 'not-found'; path: string };

/** The app-relative path of `pathname`, given the base's pathname (which ends with "/"). */
export function stripBase(pathname: string, basePathname: string): string {
  const base = basePathname.endsWith('/') ? basePathname : `${basePathname}/`;
  if (pathname === base.slice(0, -1) || pathname === base) return '/';
  if (pathname.startsWith(base)) return `/${pathname.slice(base.length)}`;
  return pathname;
}

/** The route a path names. Unknown paths are a not-found page, never a crash. */
export function parseRoute(path: string): Route {
  const clean = path.replace(/\/+$/, '') || '/';
  const parts = clean.split('/').filter(Boolean).map(safeDecode);
  if (parts.length === 0) return { name: 'dashboard' };
  const [head, second, ...rest] = parts;
  if (rest.length > 0) return { name: 'not-found', path };
  switch (head) {
    case 'servers':
    case 'events':
    case 'insights':
    case 'filters':
    case 'settings':
    case 'audit':
    case 'protected':
    case 'feeds':
    case 'sharing':
    case 'defence':
    case 'profiles':
    case 'rollouts':
    case 'fleet-jails':
    case 'login':
      return second === undefined ? { name: head } : { name: 'not-found', path };
    case 'jails':
      return second === undefined ? { name: 'jails' } : { name: 'jail', jail: second };
    case 'addresses':
      return second === undefined ? { name: 'not-found', path } : { name: 'address', ip: second };
    default:
      return { name: 'not-found', path };
  }
}

function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/** The app-relative path of a route. */
export function pathOf(route: Route): string {
  switch (route.name) {
    case 'dashboard':
      return '/';
    case 'jail':
      return `/jails/${encodeURIComponent(route.jail)}`;
    case 'address':
      return `/addresses/${encodeURIComponent(route.ip)}`;
    case 'not-found':
      return route.path;
    default:
      return `/${route.name}`;
  }
}

/**
 * Where to go back to after logging in: an app-relative path from the `return_to` parameter, or
 * "/" for anything that is not plainly one (an absolute URL, "//host", the login page itself).
 */
export function safeReturnTo(raw: string | null | undefined): string {
  if (!raw || !raw.startsWith('/') || raw.startsWith('//') || raw.startsWith('/\\')) return '/';
  if (/^\/login(?:[/?#]|$)/.test(raw)) return '/';
  return raw;
}
