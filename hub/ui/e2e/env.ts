// What tests/tests/e2e/ui_browser.rs tells the browser tests about the environment it started, and small
// helpers that look at the real components behind the hub (fail2ban, maildev).
import { execFileSync } from 'node:child_process';
import { appendFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { expect, type Page } from '@playwright/test';

function need(name: string): string {
  const value = process.env[name];
  if (!value) {
    throw new Error(
      `${name} is not set: these tests run against a real hub started by the Rust harness; run ` +
        '`cargo nextest run -p banhub-tests --test e2e -E "test(/^ui_browser::/)"` (it starts everything and then Playwright)',
    );
  }
  return value;
}

export const env = {
  hub: need('BANHUB_URL').replace(/\/?$/, '/'),
  serverA: need('BANHUB_SERVER_A'),
  serverB: need('BANHUB_SERVER_B'),
  jail: process.env.BANHUB_JAIL ?? 'testauth',
  logA: need('BANHUB_LOG_A'),
  f2bConfA: need('BANHUB_F2B_CONF_A'),
  f2bSockA: need('BANHUB_F2B_SOCK_A'),
  f2bConfB: need('BANHUB_F2B_CONF_B'),
  f2bSockB: need('BANHUB_F2B_SOCK_B'),
  /** `oidc`: the suite signs in through the provider at `issuer`; `local`: the hub runs in local
   * mode and the suite signs in as its administrator with `adminPassword`. */
  login: (process.env.BANHUB_UI_LOGIN ?? 'oidc') as 'oidc' | 'local',
  issuer: process.env.BANHUB_UI_LOGIN === 'local' ? '' : need('BANHUB_OIDC_ISSUER'),
  adminPassword: process.env.BANHUB_UI_LOGIN === 'local' ? need('BANHUB_ADMIN_PASSWORD') : '',
  maildev: need('BANHUB_MAILDEV_URL'),
  smtpPort: need('BANHUB_SMTP_PORT'),
  admin: process.env.BANHUB_ADMIN_LOGIN ?? 'alice',
  viewer: process.env.BANHUB_VIEWER_LOGIN ?? 'victor',
  /** A provider account whose groups the hub maps to no role. */
  noRole: process.env.BANHUB_NOROLE_LOGIN ?? 'nora',
  screenshots: process.env.BANHUB_SCREENSHOTS ?? 'screenshots',
};

function bannedIn(conf: string, sock: string, jail: string): string[] {
  const out = execFileSync('fail2ban-client', ['-c', conf, '-s', sock, 'get', jail, 'banned'], {
    encoding: 'utf8',
  });
  // A Python list repr: ['192.0.2.1', '198.51.100.7']
  return [...out.matchAll(/'([^']+)'/g)].map((m) => m[1]);
}

/** What fail2ban on server A has banned in a jail right now (`fail2ban-client get <jail> banned`). */
export function bannedOnA(jail = env.jail): string[] {
  return bannedIn(env.f2bConfA, env.f2bSockA, jail);
}

/** The same for server B. */
export function bannedOnB(jail = env.jail): string[] {
  return bannedIn(env.f2bConfB, env.f2bSockB, jail);
}

/** Appends `n` failed-login lines for `ip` to server A's watched log, stamped now (local time). */
export function failLogins(ip: string, n: number): void {
  const d = new Date();
  const p = (x: number) => String(x).padStart(2, '0');
  const stamp = `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  appendFileSync(env.logA, `${stamp} Failed login for root from ${ip}\n`.repeat(n));
}

export interface Mail {
  subject: string;
  to: { address: string }[];
  text?: string;
}

/** The messages maildev received. */
export async function mails(): Promise<Mail[]> {
  const response = await fetch(`${env.maildev.replace(/\/$/, '')}/api/email`);
  if (!response.ok) throw new Error(`maildev answered ${response.status}`);
  return (await response.json()) as Mail[];
}

/** Logs in with the local administrator's form on the hub's login page. */
export async function localLogin(page: Page, login: string, password: string): Promise<void> {
  await page.goto('./');
  await page.waitForURL(/\/login\?return_to=/);
  await page.locator('input[name=username]').fill(login);
  await page.locator('input[name=password]').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((url) => url.href.startsWith(env.hub) && !url.pathname.endsWith('/login'));
}

/** Logs in through the OIDC provider's development login and consent pages. */
export async function oidcLogin(page: Page, login: string): Promise<void> {
  await page.goto('./');
  await page.waitForURL(/\/login\?return_to=/);
  await page.getByRole('link', { name: 'Sign in' }).click();
  // The provider's own pages (another origin: 127.0.0.1 on its port).
  await page.locator('input[name=login]').fill(login);
  await page.locator('input[name=password]').fill('any password');
  await page.locator('button[type=submit]').click();
  // Consent, when the provider asks for it (a second interaction page), else straight back.
  const consent = page.locator('input[name=prompt][value=consent]');
  await expect
    .poll(async () => page.url().startsWith(env.hub) || (await consent.count()) > 0, { timeout: 20_000 })
    .toBe(true);
  if (!page.url().startsWith(env.hub)) await page.locator('button[type=submit]').click();
  await page.waitForURL((url) => url.href.startsWith(env.hub) && !url.pathname.includes('/auth/'));
}

/** Ends the page's session on the hub with a plain request (no provider pages), so the harness finds
 * only the sessions ui.spec.ts leaves behind. With OIDC the hub answers with a redirect to the
 * provider's end-session page, which a fetch does not follow to another origin: the session is over
 * on the hub once the redirect is answered. */
export async function endSession(page: Page): Promise<void> {
  const answer = await page.evaluate(async () => {
    const response = await fetch('auth/logout', { method: 'POST', credentials: 'same-origin', redirect: 'manual' });
    return { type: response.type, status: response.status };
  });
  expect(answer.type === 'opaqueredirect' || (answer.status >= 200 && answer.status < 300), JSON.stringify(answer)).toBe(true);
}

/** Saves a full-page screenshot as <dir>/<name>.png. */
export async function shoot(page: Page, name: string): Promise<void> {
  mkdirSync(env.screenshots, { recursive: true });
  await page.screenshot({ path: join(env.screenshots, `${name}.png`), fullPage: true });
}
