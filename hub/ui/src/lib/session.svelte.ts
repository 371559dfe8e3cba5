// Who is signed in, as `GET /auth/status` says, and what their role allows.
import { ApiError, get, post } from './api/client';
import { allows, strongestRole, type Capability, type Role } from './roles';

export interface User {
  subject: string;
  name?: string | null;
  email?: string | null;
  role?: string | null;
  roles?: string[] | null;
}

export interface AuthStatus {
  authenticated: boolean;
  mode: 'oidc' | 'local' | string;
  user: User | null;
}

export const session = $state({
  loaded: false,
  /** `oidc` or `local`; `none` when this hub has no login at all (loopback-only hubs before auth). */
  mode: 'none' as string,
  authenticated: false,
  user: null as User | null,
  role: null as Role | null,
  error: '' as string,
});

/** Reads the session from the hub. */
export async function loadSession(): Promise<void> {
  try {
    const status = await get<AuthStatus>('auth/status');
    session.mode = status.mode;
    session.authenticated = status.authenticated;
    session.user = status.user;
    session.role = status.user ? strongestRole([status.user.role, ...(status.user.roles ?? [])]) : null;
    session.error = '';
  } catch (error) {
    if (error instanceof ApiError && error.status === 404 && error.code === 'not_found') {
      // A hub built without operator login serves only on loopback, to whoever can reach it.
      session.mode = 'none';
      session.authenticated = true;
      session.user = null;
      session.role = 'admin';
      session.error = '';
    } else {
      session.error = error instanceof Error ? error.message : String(error);
    }
  } finally {
    session.loaded = true;
  }
}

export function can(capability: Capability): boolean {
  return allows(session.role, capability);
}

/** Local-mode login. */
export async function loginLocal(username: string, password: string): Promise<void> {
  await post('auth/login', { username, password });
  await loadSession();
}

/** The URL that starts a login through the hub (OIDC: the provider's page). */
export function loginUrl(returnTo: string): string {
  return `auth/login?return_to=${encodeURIComponent(returnTo)}`;
}

/** OIDC logout: a full page load of `GET /auth/logout`, which ends the session on the hub and then
 * sends the browser to the provider's end-session page (which returns to the hub). A fetch cannot
 * take the browser there: the provider is another origin. */
export function logoutThroughProvider(): void {
  window.location.assign('auth/logout');
}

export async function logout(): Promise<void> {
  await post('auth/logout');
  session.authenticated = false;
  session.user = null;
  session.role = null;
}
