// The operator UI in Chromium against a real hub, two real agents beside real fail2ban servers, the
// real OIDC provider and a real SMTP server (all started by tests/tests/e2e/ui_browser.rs). The admin
// (alice) and the viewer (victor) sign in through the provider's development login and consent
// pages. With BANHUB_UI_LOGIN=local the suite signs in as the hub's local administrator instead, and
// the viewer scenario (which needs the provider's users) is skipped; local-login.spec.ts covers the
// local login form on its own.
import { expect, test, type Browser, type Page } from '@playwright/test';
import { bannedOnA, bannedOnB, env, failLogins, localLogin, mails, oidcLogin, shoot } from './env';

test.describe.configure({ mode: 'serial' });

let admin: Page;

async function selectServer(page: Page, name: string) {
  const select = page.getByTestId('server-select');
  await expect(select.locator('option', { hasText: name })).toHaveCount(1);
  const value = await select.locator('option', { hasText: name }).getAttribute('value');
  await select.selectOption(value!);
}

/** The main navigation (other links share its names, e.g. "← Jails"). */
const pages = (page: Page) => page.getByRole('navigation', { name: 'Pages' });

/** Requests that went to a host other than the hub or the identity provider. */
const foreign: string[] = [];

async function newPage(browser: Browser): Promise<Page> {
  const context = await browser.newContext({ baseURL: env.hub });
  const page = await context.newPage();
  const allowed = new Set([new URL(env.hub).host]);
  if (env.issuer) allowed.add(new URL(env.issuer).host);
  const provider = env.issuer ? new URL(env.issuer).host : '';
  page.on('request', (request) => {
    const url = new URL(request.url());
    if (url.protocol === 'data:' || allowed.has(url.host)) return;
    // The identity provider's own development pages load a web font from elsewhere; only the hub's
    // pages are held to "no host but the hub".
    let from = '';
    try {
      from = new URL(request.frame().url()).host;
    } catch {
      // A request without a frame (e.g. a service worker's) is judged by its own host alone.
    }
    if (provider && from === provider) return;
    foreign.push(request.url());
  });
  return page;
}

test.beforeAll(async ({ browser }) => {
  admin = await newPage(browser);
});

const withOidc = env.login === 'oidc';
const noOidc = 'the suite signs in as the local administrator (BANHUB_UI_LOGIN=local): no OIDC users';

test('an admin logs in', async () => {
  if (withOidc) {
    await oidcLogin(admin, env.admin);
  } else {
    await localLogin(admin, env.admin, env.adminPassword);
  }
  await expect(admin.getByRole('heading', { name: 'Dashboard', level: 1 })).toBeVisible();
  if (withOidc) await expect(admin.getByText('Alice Admin')).toBeVisible();
  await expect(admin.locator('header .badge', { hasText: 'admin' })).toBeVisible();
  await expect(admin.getByTestId('fleet-health')).toContainText('2');
});

test('a ban caused by log lines appears live on the dashboard', async () => {
  await admin.goto('./');
  await expect(admin.getByTestId('live-state')).toHaveText('● live');
  // Marks this page load: the ban must arrive over the stream, not through a reload.
  await admin.evaluate(() => ((window as unknown as { __sameLoad: boolean }).__sameLoad = true));
  const ip = '203.0.113.77';
  failLogins(ip, 3);
  await expect(admin.getByTestId('live-feed')).toContainText(ip, { timeout: 30_000 });
  const row = admin.getByTestId('live-feed').locator('li', { hasText: ip }).first();
  await expect(row).toContainText('ban');
  await expect(row).toContainText(env.jail);
  await expect(row).toContainText(env.serverA);
  expect(await admin.evaluate(() => (window as unknown as { __sameLoad?: boolean }).__sameLoad)).toBe(true);
  expect(bannedOnA()).toContain(ip);
});

test('the dashboard shows the fleet', async () => {
  await admin.goto('./');
  await expect(admin.getByRole('heading', { name: 'Dashboard', level: 1 })).toBeVisible();
  await expect(admin.getByTestId('fleet-health')).toContainText('2');
});

test('the server selector switches the jail pages between servers', async () => {
  // 203.0.113.77 is banned on A only (the scenario above); the same jail page shows it for A, not for B.
  expect(bannedOnA()).toContain('203.0.113.77');
  expect(bannedOnB()).not.toContain('203.0.113.77');
  await selectServer(admin, env.serverB);
  await admin.goto(`jails/${env.jail}`);
  const heading = admin.getByRole('heading', { level: 1 });
  const row = admin.getByTestId('banned').locator('tr[data-ip="203.0.113.77"]');
  await expect(heading).toHaveText(`${env.jail} on ${env.serverB}`);
  await expect(admin.getByTestId('banned-total')).toHaveText('0 banned');
  await expect(admin.getByText(`Nothing is banned in ${env.jail}.`)).toBeVisible();
  await selectServer(admin, env.serverA);
  await expect(heading).toHaveText(`${env.jail} on ${env.serverA}`);
  await expect(row).toHaveCount(1);
  await selectServer(admin, env.serverB);
  await expect(heading).toHaveText(`${env.jail} on ${env.serverB}`);
  await expect(row).toHaveCount(0);
  await expect(admin.getByTestId('banned-total')).toHaveText('0 banned');
  await selectServer(admin, env.serverA);
});

test('ban and unban an address from the jail page, and fail2ban follows', async () => {
  await selectServer(admin, env.serverA);
  await pages(admin).getByRole('link', { name: 'Jails', exact: true }).click();
  await admin.getByTestId('jails').getByRole('link', { name: env.jail }).click();
  await expect(admin.getByRole('heading', { level: 1 })).toContainText(env.jail);
  const ip = '198.51.100.23';
  expect(bannedOnA()).not.toContain(ip);

  await admin.locator('input[name=ban-ip]').fill(ip);
  await admin.getByRole('button', { name: 'Ban', exact: true }).click();
  await expect(admin.getByText(`${ip} banned in ${env.jail}.`)).toBeVisible();
  await expect(admin.getByTestId('banned').locator(`tr[data-ip="${ip}"]`)).toBeVisible();
  await expect.poll(() => bannedOnA()).toContain(ip);

  // Search narrows the list to matching addresses.
  await admin.getByLabel('Search banned addresses').fill('198.51.100.');
  await expect(admin.getByTestId('banned').locator('tbody tr')).toHaveCount(1);
  await admin.getByLabel('Search banned addresses').fill('');

  // A bad address is refused by the hub and said at the field.
  await admin.locator('input[name=ban-ip]').fill('not-an-ip');
  await admin.getByRole('button', { name: 'Ban', exact: true }).click();
  await expect(admin.locator('#ban-error')).toBeVisible();

  await admin.getByRole('button', { name: `Unban ${ip}` }).click();
  await expect(admin.getByText(`${ip} unbanned in ${env.jail}.`)).toBeVisible();
  await expect(admin.getByTestId('banned').locator(`tr[data-ip="${ip}"]`)).toHaveCount(0);
  await expect.poll(() => bannedOnA()).not.toContain(ip);
});

test('a protected network: added with a note, a ban of it warned about and refused, then deleted', async () => {
  const network = '192.0.2.64/26';
  const ip = '192.0.2.70';
  await pages(admin).getByRole('link', { name: 'Protected', exact: true }).click();
  await expect(admin.getByRole('heading', { level: 1 })).toHaveText('Protected networks');
  await admin.locator('input[name=protect-network]').fill(network);
  await admin.locator('input[name=protect-note]').fill('office VPN');
  await admin.getByRole('button', { name: 'Protect', exact: true }).click();
  const row = admin.getByTestId('protected-networks').locator('tr', { hasText: network });
  await expect(row).toContainText('office VPN');

  await selectServer(admin, env.serverA);
  await pages(admin).getByRole('link', { name: 'Jails', exact: true }).click();
  await admin.getByTestId('jails').getByRole('link', { name: env.jail }).click();
  await admin.locator('input[name=ban-ip]').fill(ip);
  await admin.getByRole('button', { name: 'Ban', exact: true }).click();
  await expect(admin.getByTestId('ban-warning')).toContainText(network);
  await admin.getByRole('button', { name: 'Ban anyway', exact: true }).click();
  await expect(admin.locator('#ban-error')).toContainText(network);
  expect(bannedOnA()).not.toContain(ip);

  await pages(admin).getByRole('link', { name: 'Protected', exact: true }).click();
  admin.once('dialog', (dialog) => dialog.accept());
  await row.getByRole('button', { name: 'Delete' }).click();
  await expect(admin.getByTestId('protected-networks')).toHaveCount(0);

  // Back where the next scenario starts: the jail page.
  await pages(admin).getByRole('link', { name: 'Jails', exact: true }).click();
  await admin.getByTestId('jails').getByRole('link', { name: env.jail }).click();
  await expect(admin.getByRole('heading', { level: 1 })).toContainText(env.jail);
});

test('a jail configuration fail2ban refuses shows its error, and nothing changes', async () => {
  const editor = admin.locator('#jail-override');
  await expect(editor).toBeVisible();
  const original = await editor.inputValue();

  // Refused by the hub itself: a section of another jail, shown under the editor.
  await editor.fill(`[${env.jail}]\nmaxretry = 4\n[DEFAULT]\nbantime = 1\n`);
  await admin.getByRole('button', { name: 'Review changes' }).click();
  await admin.getByRole('button', { name: 'Save', exact: true }).click();
  await expect(admin.locator('#jail-override-error')).toContainText('[DEFAULT]');

  // Refused by fail2ban: a filter that does not exist. The diff is shown before saving.
  await editor.fill(`[${env.jail}]\nfilter = no-such-filter-here\n`);
  await admin.getByRole('button', { name: 'Review changes' }).click();
  await expect(admin.getByTestId('config-diff')).toContainText('filter = no-such-filter-here');
  await admin.getByRole('button', { name: 'Save', exact: true }).click();
  const error = admin.getByTestId('config-error');
  await expect(error).toBeVisible({ timeout: 60_000 });
  await expect(error).toContainText('Not saved');
  await expect(error).toContainText(/no-such-filter-here|filter/i);

  // The file on the host is what it was.
  await admin.reload();
  await expect(admin.locator('#jail-override')).toHaveValue(original);
  expect(bannedOnA()).toBeInstanceOf(Array); // fail2ban still answers
});

test('a filter test highlights the matching lines', async () => {
  await pages(admin).getByRole('link', { name: 'Filters', exact: true }).click();
  await admin.locator('select[name=filter]').selectOption(env.jail);
  const now = new Date().toISOString().slice(0, 19).replace('T', ' ');
  await admin
    .locator('textarea[name=lines]')
    .fill(`${now} Failed login for root from 192.0.2.44\n${now} Accepted password for bob from 192.0.2.45`);
  await admin.getByRole('button', { name: 'Test', exact: true }).click();
  const result = admin.getByTestId('filter-result');
  await expect(result.getByTestId('matched-count')).toHaveText('1');
  await expect(result.locator('li[data-matched=true] mark')).toHaveText('192.0.2.44');
  await expect(result.locator('li[data-matched=false]')).toContainText('192.0.2.45');
});

test('settings refuse a bad value at its field, and a test e-mail arrives', async () => {
  await pages(admin).getByRole('link', { name: 'Settings', exact: true }).click();
  const smtp = admin.getByLabel('Send e-mail through an SMTP server');
  await expect(smtp).toBeVisible();
  if (!(await smtp.isChecked())) await smtp.check();
  await admin.locator('input[name="smtp.host"]').fill('127.0.0.1');
  await admin.locator('input[name="smtp.port"]').fill(env.smtpPort);
  await admin.locator('select[name="smtp.tls"]').selectOption('none');
  await admin.locator('input[name="smtp.from"]').fill('not an address');
  await admin.locator('textarea[name="alerts.recipients"]').fill('ops@example.test');
  await admin.getByRole('button', { name: 'Save settings' }).click();
  await expect(admin.locator('input[name="smtp.from"]')).toHaveAttribute('aria-invalid', 'true');

  await admin.locator('input[name="smtp.from"]').fill('banhub <banhub@example.test>');
  await admin.getByRole('button', { name: 'Save settings' }).click();
  await expect(admin.getByText(/^Saved/)).toBeVisible();

  await admin.locator('input[name=test-to]').fill('ops@example.test');
  await admin.getByRole('button', { name: 'Send test e-mail' }).click();
  await expect(admin.getByTestId('test-email-result')).toBeVisible({ timeout: 30_000 });
  await expect
    .poll(async () => (await mails()).filter((m) => m.to.some((t) => t.address === 'ops@example.test')).length, { timeout: 30_000 })
    .toBeGreaterThan(0);
});

test('servers: add one with a copyable enroll command, test one, delete one', async () => {
  await pages(admin).getByRole('link', { name: 'Servers', exact: true }).click();
  await admin.locator('input[name=name]').fill('web-3');
  await admin.getByRole('button', { name: 'Add server' }).click();
  await expect(admin.getByTestId('enroll-command')).toContainText(/^banhub-agent enroll bh1\./);
  await expect(admin.getByRole('button', { name: 'Copy command' })).toBeVisible();
  const row = admin.locator(`tr[data-server="web-3"]`);
  await expect(row).toContainText('pending');

  const a = admin.locator(`tr[data-server="${env.serverA}"]`);
  await a.getByRole('button', { name: 'Test' }).click();
  await expect(a.getByTestId('test-result')).toContainText('pong');

  // A host without an agent: the callback secret, shown once, is what its fail2ban action sends.
  await row.getByRole('button', { name: 'Callback secret' }).click();
  const secret = ((await admin.getByTestId('callback-secret-value').textContent()) ?? '').trim();
  expect(secret.length).toBeGreaterThanOrEqual(32);
  const callback = (s: string) =>
    fetch(new URL('api/ban', env.hub), {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-callback-secret': s },
      body: JSON.stringify({ ip: '198.51.100.99', jail: 'sshd', failures: 3 }),
    });
  const accepted = await callback(secret);
  expect(accepted.status).toBe(200);
  await row.getByRole('button', { name: 'Revoke secret' }).click();
  await row.getByRole('button', { name: 'Revoke', exact: true }).click(); // confirm
  await expect(admin.getByRole('status').filter({ hasText: 'revoked' })).toBeVisible();
  expect((await callback(secret)).status).toBe(401);

  await row.getByRole('button', { name: 'Delete' }).click();
  await row.getByRole('button', { name: 'Delete' }).click(); // confirm
  await expect(row).toHaveCount(0);
});

test('events: filter by address, page, and export the same selection as CSV', async () => {
  await pages(admin).getByRole('link', { name: 'Events', exact: true }).click();
  await admin.getByLabel('Address or network').fill('203.0.113.77');
  await admin.getByRole('button', { name: 'Apply' }).click();
  await expect(admin).toHaveURL(/ip=203\.0\.113\.77/);
  const rows = admin.getByTestId('events').locator('tbody tr');
  await expect(rows.first()).toContainText('203.0.113.77');
  const href = await admin.getByRole('link', { name: 'Export CSV' }).getAttribute('href');
  expect(href).toContain('api/events/bans.csv?ip=203.0.113.77');
  const csv = await admin.request.get(new URL(href!, env.hub).href);
  expect(csv.ok()).toBe(true);
  const text = await csv.text();
  expect(text.split('\r\n')[0]).toContain('occurredAt');
  expect(text).toContain('203.0.113.77');
});

test('every page, light and dark, at laptop and phone widths', async () => {
  const pages: [string, string][] = [
    ['dashboard', './'],
    ['servers', 'servers'],
    ['jails', 'jails'],
    ['jail', `jails/${env.jail}`],
    ['events', 'events'],
    ['insights', 'insights'],
    ['filters', 'filters'],
    ['settings', 'settings'],
    ['audit', 'audit'],
  ];
  for (const scheme of ['light', 'dark'] as const) {
    await admin.emulateMedia({ colorScheme: scheme });
    for (const [name, path] of pages) {
      await admin.setViewportSize({ width: 1366, height: 860 });
      await admin.goto(path);
      await expect(admin.getByRole('heading', { level: 1 })).toBeVisible();
      await expect(admin.locator('[role=status].loading')).toHaveCount(0);
      await shoot(admin, `${name}-${scheme}`);
      await admin.setViewportSize({ width: 390, height: 844 });
      await shoot(admin, `${name}-${scheme}-phone`);
    }
  }
  await admin.setViewportSize({ width: 1366, height: 860 });
  await admin.emulateMedia({ colorScheme: 'light' });
});

test('the theme switch and the keyboard', async () => {
  await admin.goto('./');
  await admin.keyboard.press('Tab');
  await expect(admin.getByRole('link', { name: 'Skip to content' })).toBeFocused();
  const before = await admin.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await admin.getByRole('button', { name: /Change theme/ }).click(); // system → light
  await admin.getByRole('button', { name: /Change theme/ }).click(); // light → dark
  await expect(admin.locator('html')).toHaveAttribute('data-theme', 'dark');
  const after = await admin.evaluate(() => getComputedStyle(document.body).backgroundColor);
  expect(after).not.toBe(before);
  await admin.getByRole('button', { name: /Change theme/ }).click(); // back to the system's
});

test('a viewer sees no admin or operator controls', async ({ browser }) => {
  test.skip(!withOidc, noOidc);
  const viewer = await newPage(browser);
  await viewer.goto('login');
  await expect(viewer.getByRole('link', { name: 'Sign in' })).toBeVisible();
  for (const scheme of ['light', 'dark'] as const) {
    await viewer.emulateMedia({ colorScheme: scheme });
    await shoot(viewer, `login-${scheme}`);
  }
  await oidcLogin(viewer, env.viewer);
  await expect(viewer.locator('header .badge', { hasText: 'viewer' })).toBeVisible();
  const nav = viewer.getByRole('navigation', { name: 'Pages' });
  await expect(nav.getByRole('link', { name: 'Dashboard' })).toBeVisible();
  await expect(nav.getByRole('link', { name: 'Settings' })).toHaveCount(0);
  await expect(nav.getByRole('link', { name: 'Audit log' })).toHaveCount(0);
  await expect(nav.getByRole('link', { name: 'Protected' })).toHaveCount(0);

  await nav.getByRole('link', { name: 'Servers' }).click();
  await expect(viewer.getByTestId('servers')).toBeVisible();
  await expect(viewer.getByRole('heading', { name: 'Add a server' })).toHaveCount(0);
  await expect(viewer.getByRole('button', { name: 'Delete' })).toHaveCount(0);
  await expect(viewer.getByRole('button', { name: 'Test' })).toHaveCount(0);

  await selectServer(viewer, env.serverA);
  await nav.getByRole('link', { name: 'Jails' }).click();
  await expect(viewer.getByTestId('jails')).toBeVisible();
  await expect(viewer.getByRole('button', { name: /^(Enable|Disable)$/ })).toHaveCount(0);
  await expect(viewer.getByRole('button', { name: 'Reload fail2ban' })).toHaveCount(0);

  await viewer.goto(`jails/${env.jail}`);
  await expect(viewer.locator('#jail-override')).toHaveAttribute('readonly', '');
  await expect(viewer.locator('input[name=ban-ip]')).toHaveCount(0);
  await expect(viewer.getByRole('button', { name: /^Unban / })).toHaveCount(0);
  await expect(viewer.getByRole('button', { name: 'Review changes' })).toHaveCount(0);

  await viewer.goto('filters');
  await expect(viewer.getByRole('button', { name: 'Test', exact: true })).toBeDisabled();

  await viewer.goto('settings');
  await expect(viewer.getByText('Only administrators can see and change the settings.')).toBeVisible();
  await viewer.context().close();
});

test('a user the hub maps no role to is told why on the login page, and gets no session', async ({ browser }) => {
  test.skip(!withOidc, noOidc);
  const page = await newPage(browser);
  await oidcLogin(page, env.noRole);
  await expect(page).toHaveURL(/\/login\?error=/);
  await expect(page.getByRole('alert')).toContainText('The login did not complete');
  await expect(page.getByRole('alert')).toContainText('is mapped to a banhub role');
  await expect(page.getByRole('link', { name: 'Sign in' })).toBeVisible();
  await page.goto('servers');
  await page.waitForURL(/\/login\?return_to=%2Fservers/);
  await page.context().close();
});

test('the audit log shows what the admin did, and logging out ends the session', async () => {
  await admin.goto('audit');
  await expect(admin.getByTestId('audit')).toContainText(/ban/i);
  await admin.getByRole('button', { name: 'Log out' }).click();
  if (withOidc) {
    // Ended on the hub, then at the provider: its end-session page asks, and sends the browser back.
    await admin.waitForURL((url) => url.href.startsWith(env.issuer));
    await admin.getByRole('button', { name: 'Yes, sign me out' }).click();
  }
  await admin.waitForURL(/\/login/);
  await admin.goto('servers');
  await admin.waitForURL(/\/login\?return_to=%2Fservers/);
  if (withOidc) {
    // The provider's session is over too: signing in again asks for the login.
    await admin.getByRole('link', { name: 'Sign in' }).click();
    await expect(admin.locator('input[name=login]')).toBeVisible();
  }
});

test('no page asked any host but the hub and the identity provider', () => {
  expect(foreign).toEqual([]);
});
