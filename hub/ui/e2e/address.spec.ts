// The address page in Chromium against the real fleet of tests/tests/e2e/ui_browser.rs: an address
// banned from log lines on server A, then banned everywhere and lifted everywhere from its page;
// where it is banned now, its country and ASN (real .mmdb files the Rust test wrote), and the RDAP
// and AbuseIPDB panels filled by the hub from the test's local lookup server (BANHUB_LOOKUP_URL,
// serving the services' real formats). An address outside the public internet is shown as such and
// the lookup server hears nothing of it. Then the same page in German (the UI's language as
// `banhub.locale` remembers it), English again afterwards. Leaves target/ui-e2e/address.png.
import { expect, test, type Page } from '@playwright/test';
import { join } from 'node:path';
import { bannedOnA, bannedOnB, env, failLogins, localLogin, oidcLogin } from './env';

test.describe.configure({ mode: 'serial' });

const lookup = (process.env.BANHUB_LOOKUP_URL ?? '').replace(/\/$/, '');
const artifacts = process.env.BANHUB_UI_ARTIFACTS ?? 'test-results';
/** In Google's 8.8.8.0/24: the lookup server, the country and the ASN databases know it. */
const ip = '8.8.8.8';

let page: Page;

/** How many requests the lookup server has received. */
async function lookupRequests(): Promise<number> {
  const response = await fetch(`${lookup}/_requests`);
  if (!response.ok) throw new Error(`the lookup server answered ${response.status}`);
  return ((await response.json()) as unknown[]).length;
}

/** Reloads the address page until `check` passes (the page shows what was stored when it loaded). */
async function untilShown(check: () => Promise<void>, timeout = 45_000): Promise<void> {
  await expect(async () => {
    await page.reload();
    await check();
  }).toPass({ timeout });
}

test.beforeAll(async ({ browser }) => {
  if (!lookup) throw new Error('BANHUB_LOOKUP_URL is not set: run this suite through ui_browser.rs');
  page = await (await browser.newContext({ baseURL: env.hub })).newPage();
  if (env.login === 'oidc') await oidcLogin(page, env.admin);
  else await localLogin(page, env.admin, env.adminPassword);
});

test('the address page shows bans, country, ASN, RDAP and AbuseIPDB, and bans and lifts everywhere', async () => {
  failLogins(ip, 3);
  await expect.poll(() => bannedOnA(), { timeout: 30_000 }).toContain(ip);
  await page.goto(`addresses/${ip}`);
  await expect(page.getByRole('heading', { level: 1 })).toHaveText(`Address ${ip}`);
  const now = page.getByTestId('address-banned-now');
  await untilShown(async () => {
    await expect(now.locator(`tr[data-server="${env.serverA}"]`)).toContainText(env.jail, { timeout: 2_000 });
  });
  await expect(now.locator(`tr[data-server="${env.serverA}"]`)).toContainText('own ban');
  await expect(page.getByTestId('address-scope')).toHaveAttribute('data-scope', 'public');
  await expect(page.getByTestId('address-country')).toHaveText('US');
  await expect(page.getByTestId('address-asn')).toHaveText('AS15169 · GOOGLE');
  // The lookups fill in after the page: RDAP through the bootstrap file and the registry.
  const rdap = page.getByTestId('address-rdap');
  await expect(rdap).toContainText('GOGL (NET-8-8-8-0-2)');
  await expect(rdap).toContainText('8.8.8.0/24');
  await expect(rdap).toContainText('Google LLC');
  await expect(rdap.getByRole('link', { name: 'network-abuse@google.com' })).toBeVisible();
  const abuse = page.getByTestId('address-abuseipdb');
  await expect(abuse.getByTestId('address-abuse-score')).toContainText('87%');
  await expect(abuse).toContainText('42 reports by 17 users');
  await expect(abuse).toContainText('Data Center/Web Hosting/Transit');
  // The log lines that led to the ban are on the page.
  await expect(page.getByTestId('address-server').filter({ hasText: env.serverA })).toContainText(
    `Failed login for root from ${ip}`,
  );
  await page.screenshot({ path: join(artifacts, 'address.png'), fullPage: true });

  // Ban everywhere from the page: both servers' fail2ban hold it, and the page says so.
  const form = page.getByTestId('fleet-ban');
  await form.locator('input[name=fleet-jail]').fill(env.jail);
  await form.getByRole('button', { name: 'Ban everywhere', exact: true }).click();
  await expect(page.getByTestId('fleet-ban-result')).toBeVisible();
  await expect.poll(() => bannedOnB(), { timeout: 30_000 }).toContain(ip);
  await untilShown(async () => {
    await expect(now.locator(`tr[data-server="${env.serverB}"]`)).toContainText(env.jail, { timeout: 2_000 });
  });
  // A reload asks no outside service again: the answers come from the hub's cache.
  const asked = await lookupRequests();
  await page.reload();
  await expect(page.getByTestId('address-rdap')).toContainText('From the cache');
  await expect(page.getByTestId('address-abuseipdb')).toContainText('From the cache');
  expect(await lookupRequests()).toBe(asked);

  // Lift it everywhere: fail2ban lets go on both servers, and the page has nothing banned now.
  await form.getByRole('button', { name: 'Unban everywhere', exact: true }).click();
  await form.getByRole('button', { name: 'Unban everywhere', exact: true }).click(); // confirm
  await expect(page.getByTestId('unban-everywhere-result')).toBeVisible();
  await expect.poll(() => bannedOnA().concat(bannedOnB()), { timeout: 30_000 }).not.toContain(ip);
  await untilShown(async () => {
    await expect(page.getByTestId('address-not-banned')).toBeVisible({ timeout: 2_000 });
  });
});

test('an address outside the public internet is shown as such and never looked up', async () => {
  const asked = await lookupRequests();
  await page.goto('addresses/10.20.30.40');
  await expect(page.getByTestId('address-scope')).toHaveAttribute('data-scope', 'private');
  await expect(page.getByTestId('address-rdap-skipped')).toContainText('never sent to outside services');
  await expect(page.getByTestId('address-abuseipdb-skipped')).toBeVisible();
  await page.goto('addresses/2001:db8::7');
  await expect(page.getByTestId('address-scope')).toHaveAttribute('data-scope', 'documentation');
  await expect(page.getByTestId('address-rdap-skipped')).toBeVisible();
  expect(await lookupRequests()).toBe(asked);
});

test('the address page in German: its labels, and the lookups fill in', async () => {
  await page.evaluate(() => localStorage.setItem('banhub.locale', 'de'));
  await page.goto(`addresses/${ip}`);
  await expect(page.getByRole('heading', { level: 1 })).toHaveText(`Adresse ${ip}`);
  await expect(page.locator('html')).toHaveAttribute('lang', 'de');
  const facts = page.getByTestId('address-facts');
  await expect(facts.getByRole('heading', { name: 'Über diese Adresse' })).toBeVisible();
  await expect(page.getByTestId('address-scope')).toContainText('öffentliches Internet');
  await expect(page.getByTestId('address-country')).toHaveText('US');
  await expect(page.getByTestId('address-not-banned')).toHaveText('Derzeit nirgends gesperrt.');
  // The lookups fill in, labelled in German.
  const rdap = page.getByTestId('address-rdap');
  await expect(rdap.getByRole('heading', { name: 'RDAP (Whois)', exact: true })).toBeVisible();
  await expect(rdap).toContainText('GOGL (NET-8-8-8-0-2)');
  await expect(rdap.getByTestId('address-rdap-network')).toContainText('Abuse-Kontakt');
  await expect(rdap).toContainText(/Aus dem Cache|Abgerufen/);
  const abuse = page.getByTestId('address-abuseipdb');
  await expect(abuse.getByTestId('address-abuse-score')).toHaveText(/Missbrauchswahrscheinlichkeit: 87\s%/);
  await expect(abuse).toContainText('42 Meldungen von 17 Nutzern');
  await expect(abuse).toContainText('Zuletzt gemeldet');
  // The history and the fleet form.
  await expect(page.getByRole('heading', { level: 2, name: 'Verlauf in der Flotte' })).toBeVisible();
  const history = page.getByTestId('address-server').filter({ hasText: env.serverA });
  await expect(history.getByRole('columnheader', { name: 'Logzeilen' })).toBeVisible();
  await expect(history.locator('.badge.ban').first()).toHaveText('Sperre');
  await expect(page.getByTestId('fleet-ban').getByRole('button', { name: 'Überall sperren', exact: true })).toBeVisible();

  // A private address, in German too: its range named, and nothing asked of the lookup server.
  const asked = await lookupRequests();
  await page.goto('addresses/10.20.30.40');
  await expect(page.getByTestId('address-scope')).toContainText('privat (RFC 1918)');
  await expect(page.getByTestId('address-scope')).toContainText('wird nicht an externe Dienste gesendet');
  await expect(page.getByTestId('address-rdap-skipped')).toContainText('privat (RFC 1918)');
  await expect(page.getByTestId('address-rdap-skipped')).toContainText('wird nie an externe Dienste gesendet');
  expect(await lookupRequests()).toBe(asked);

  // English again, for the rest of this suite.
  await page.evaluate(() => localStorage.removeItem('banhub.locale'));
  await page.reload();
  await expect(page.getByRole('heading', { level: 1 })).toHaveText('Address 10.20.30.40');
  await expect(page.locator('html')).toHaveAttribute('lang', 'en');
});

test('the admin logs out, leaving no session behind', async () => {
  await page.getByRole('button', { name: 'Log out' }).click();
  if (env.login === 'oidc') {
    await page.waitForURL((url) => url.href.startsWith(env.issuer));
    await page.getByRole('button', { name: 'Yes, sign me out' }).click();
  }
  await page.waitForURL(/\/login/);
  await page.context().close();
});
