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

/** The first number cell (the "Shared" counter) of the policy row named `name` on the Sharing page. */
const sharedCounter = (page: Page, name: string) =>
  page.getByTestId('policies').locator('tr', { hasText: name }).locator('td.num').first();

test('sharing: a bad field is refused at its field, then a policy shares a ban and counts it', async () => {
  await pages(admin).getByRole('link', { name: 'Sharing', exact: true }).click();
  await expect(admin.getByRole('heading', { level: 1 })).toHaveText('Sharing');
  await admin.getByRole('button', { name: 'New policy' }).click();
  const form = admin.getByTestId('policy-form');
  await form.locator('input[name=policy-name]').fill('fleet-ssh');
  await form.locator('input[name=policy-jails]').fill('../etc');
  await form.getByRole('button', { name: 'Save', exact: true }).click();
  await expect(admin.locator('#policy-jails-error')).toBeVisible();
  await expect(form.locator('input[name=policy-jails]')).toHaveAttribute('aria-invalid', 'true');
  await expect(admin.getByTestId('policies')).toHaveCount(0);

  await form.locator('input[name=policy-jails]').fill(env.jail);
  await form.locator('select[name=policy-mode]').selectOption('fixed');
  await form.locator('input[name=policy-seconds]').fill('600');
  await form.getByRole('button', { name: 'Save', exact: true }).click();
  await expect(admin.getByTestId('policy-form')).toHaveCount(0);
  const row = admin.getByTestId('policies').locator('tr', { hasText: 'fleet-ssh' });
  await expect(row).toContainText('all servers');
  await expect(sharedCounter(admin, 'fleet-ssh')).toHaveText('0');

  // A ban on A from log lines: the policy shares it to B, and its counter follows while the page is open.
  const ip = '198.51.100.61';
  failLogins(ip, 3);
  await expect(sharedCounter(admin, 'fleet-ssh')).toHaveText('1', { timeout: 45_000 });
  const shared = admin.getByTestId('shared-bans').locator('tr', { hasText: ip });
  await expect(shared).toContainText(env.serverB);
  await expect(shared).toContainText(`${env.serverA}/${env.jail}`);
  await expect(shared).toContainText('fleet-ssh');
});

test('the address page shows the bans across the fleet and why one is banned by sharing', async () => {
  const ip = '198.51.100.61';
  await pages(admin).getByRole('link', { name: 'Sharing', exact: true }).click();
  await admin.getByTestId('shared-bans').getByRole('link', { name: ip }).click();
  await expect(admin.getByRole('heading', { level: 1 })).toHaveText(`Address ${ip}`);
  const onA = admin.getByTestId('address-server').filter({ has: admin.getByRole('heading', { name: env.serverA }) });
  const onB = admin.getByTestId('address-server').filter({ has: admin.getByRole('heading', { name: env.serverB }) });
  await expect(onA.locator('tbody tr', { hasText: env.jail }).first()).toContainText('ban');
  await expect(onB).toContainText(`from ${env.serverA}/${env.jail} by policy fleet-ssh`);
});

test('the fleet-ban form warns about protected addresses, shows the refusal at the field, bans and unbans everywhere', async () => {
  // An address that can be no client's is refused at the field.
  await pages(admin).getByRole('link', { name: 'Servers', exact: true }).click();
  const form = admin.getByTestId('fleet-ban');
  await form.locator('input[name=fleet-ip]').fill('127.0.0.1');
  await form.locator('input[name=fleet-jail]').fill(env.jail);
  await form.getByRole('button', { name: 'Ban everywhere', exact: true }).click();
  await expect(admin.locator('#fleet-ban-ip-error')).toContainText('loopback');
  await expect(form.locator('input[name=fleet-ip]')).toHaveAttribute('aria-invalid', 'true');

  // A network holding the operator's own address (the browser reaches the hub from 127.0.0.1):
  // warned, then refused at the field.
  await form.locator('input[name=fleet-ip]').fill('64.0.0.0/2');
  await form.getByRole('button', { name: 'Ban everywhere', exact: true }).click();
  await expect(admin.getByTestId('fleet-ban-warning')).toContainText('covers your own address (127.0.0.1)');
  await form.getByRole('button', { name: 'Ban anyway', exact: true }).click();
  await expect(admin.locator('#fleet-ban-ip-error')).toBeVisible();
  await expect(admin.getByTestId('fleet-ban-result')).toHaveCount(0);

  // A configured protected network: the warning and the refusal name it.
  const network = '192.0.2.128/26';
  await pages(admin).getByRole('link', { name: 'Protected', exact: true }).click();
  await admin.locator('input[name=protect-network]').fill(network);
  await admin.locator('input[name=protect-note]').fill('monitoring');
  await admin.getByRole('button', { name: 'Protect', exact: true }).click();
  const protectedRow = admin.getByTestId('protected-networks').locator('tr', { hasText: network });
  await expect(protectedRow).toContainText('monitoring');
  await pages(admin).getByRole('link', { name: 'Jails', exact: true }).click();
  const jailsForm = admin.getByTestId('fleet-ban');
  await jailsForm.locator('input[name=fleet-ip]').fill('192.0.2.130');
  await jailsForm.locator('input[name=fleet-jail]').fill(env.jail);
  await jailsForm.getByRole('button', { name: 'Ban everywhere', exact: true }).click();
  await expect(admin.getByTestId('fleet-ban-warning')).toContainText(network);
  await jailsForm.getByRole('button', { name: 'Ban anyway', exact: true }).click();
  await expect(admin.locator('#fleet-ban-ip-error')).toContainText(network);
  expect(bannedOnA()).not.toContain('192.0.2.130');
  expect(bannedOnB()).not.toContain('192.0.2.130');
  await pages(admin).getByRole('link', { name: 'Protected', exact: true }).click();
  admin.once('dialog', (dialog) => dialog.accept());
  await protectedRow.getByRole('button', { name: 'Delete' }).click();
  await expect(protectedRow).toHaveCount(0);

  // From the address page: banned on every server, then lifted everywhere; fail2ban follows.
  const ip = '198.51.100.77';
  await admin.goto(`addresses/${ip}`);
  const onAddress = admin.getByTestId('fleet-ban');
  await expect(onAddress.locator('input[name=fleet-ip]')).toHaveValue(ip);
  await onAddress.locator('input[name=fleet-jail]').fill(env.jail);
  await onAddress.getByRole('button', { name: 'Ban everywhere', exact: true }).click();
  const result = admin.getByTestId('fleet-ban-result');
  await expect(result.locator(`tr[data-server="${env.serverA}"]`)).toContainText('done');
  await expect(result.locator(`tr[data-server="${env.serverB}"]`)).toContainText('done');
  await expect.poll(() => bannedOnA()).toContain(ip);
  await expect.poll(() => bannedOnB()).toContain(ip);

  await onAddress.getByRole('button', { name: 'Unban everywhere', exact: true }).click();
  await onAddress.getByRole('button', { name: 'Unban everywhere', exact: true }).click(); // confirm
  const lifted = admin.getByTestId('unban-everywhere-result');
  await expect(lifted.locator(`tr[data-server="${env.serverA}"]`)).toContainText('lifted');
  await expect(lifted.locator(`tr[data-server="${env.serverB}"]`)).toContainText('lifted');
  await expect.poll(() => bannedOnA()).not.toContain(ip);
  await expect.poll(() => bannedOnB()).not.toContain(ip);
});

test('defence: a recidive rule is added and deleted', async () => {
  await pages(admin).getByRole('link', { name: 'Defence', exact: true }).click();
  await expect(admin.getByRole('heading', { level: 1 })).toHaveText('Fleet defence');
  const form = admin.getByTestId('recidive-form');
  await form.locator('input[name=recidive-name]').fill('   ');
  await form.getByRole('button', { name: 'Add rule' }).click();
  await expect(admin.locator('#recidive-name-error')).toBeVisible();
  await expect(form.locator('input[name=recidive-name]')).toHaveAttribute('aria-invalid', 'true');

  await form.locator('input[name=recidive-name]').fill('spread-out');
  await form.locator('input[name=recidive-min-servers]').fill('2');
  await form.getByRole('button', { name: 'Add rule' }).click();
  const row = admin.getByTestId('recidive-rules').locator('tr', { hasText: 'spread-out' });
  await expect(row).toContainText('2 servers');
  await expect(admin.locator('#recidive-name-error')).toHaveCount(0);

  await row.getByRole('button', { name: 'Delete' }).click();
  await row.getByRole('button', { name: 'Delete' }).click(); // confirm
  await expect(row).toHaveCount(0);
});

test('defence: a storm of bans from one server pauses its sharing, shown until an admin resumes it', async () => {
  // The harness's hub allows 3 shared bans a minute per source: four bans on A pass it.
  for (const ip of ['198.51.100.81', '198.51.100.82', '198.51.100.83', '198.51.100.84']) failLogins(ip, 3);
  await admin.goto('defence');
  const paused = admin.getByTestId('paused-sources').locator('tr', { hasText: env.serverA });
  await expect(async () => {
    await admin.reload();
    await expect(paused).toBeVisible({ timeout: 2_000 });
  }).toPass({ timeout: 60_000 });
  await admin.goto('./');
  await expect(admin.getByTestId('paused-banner')).toContainText(env.serverA);

  await admin.getByTestId('paused-banner').getByRole('link', { name: 'Review and resume' }).click();
  await paused.getByRole('button', { name: 'Resume' }).click();
  await paused.getByRole('button', { name: 'Resume' }).click(); // confirm
  await expect(paused).toHaveCount(0);
  await admin.reload();
  await expect(admin.getByTestId('paused-sources')).toContainText('No source is paused');
  await admin.goto('./');
  await expect(admin.getByRole('heading', { name: 'Dashboard', level: 1 })).toBeVisible();
  await expect(admin.getByTestId('paused-banner')).toHaveCount(0);
});

test('feeds: a bad name refused at its field, a feed created with its URL, a token shown once and revoked', async () => {
  await pages(admin).getByRole('link', { name: 'Feeds', exact: true }).click();
  await expect(admin.getByRole('heading', { level: 1 })).toHaveText('Blocklist feeds');
  const form = admin.getByRole('form', { name: 'New feed' });
  await form.locator('input[name=feed-name]').fill('edge firewall');
  await form.getByRole('button', { name: 'Create feed' }).click();
  await expect(admin.locator('#feed-name-error')).toBeVisible();
  await expect(form.locator('input[name=feed-name]')).toHaveAttribute('aria-invalid', 'true');

  await form.locator('input[name=feed-name]').fill('edge');
  await form.getByRole('button', { name: 'Create feed' }).click();
  const row = admin.getByTestId('feeds').locator('tr', { hasText: 'edge' });
  await expect(row).toBeVisible();
  await row.getByRole('button', { name: 'edge' }).click();
  const feed = admin.getByRole('region', { name: 'Feed edge' });
  const txtUrl = feed.locator('code.url').first();
  await expect(txtUrl).toContainText('/feeds/edge.txt?token=YOUR_FEED_TOKEN');

  await feed.getByLabel('Used by').fill('pfsense');
  await feed.getByRole('button', { name: 'Create token' }).click();
  const secret = ((await feed.getByTestId('feed-token').textContent()) ?? '').trim();
  expect(secret.length).toBeGreaterThanOrEqual(20);
  await expect(txtUrl).toContainText(`token=${encodeURIComponent(secret)}`);
  const url = ((await txtUrl.textContent()) ?? '').trim();
  expect((await fetch(url)).status).toBe(200);

  const token = feed.locator('tr', { hasText: 'pfsense' });
  await token.getByRole('button', { name: 'Revoke' }).click();
  await token.getByRole('button', { name: 'Yes, do it' }).click();
  await expect(token).toContainText('revoked');
  expect([401, 403]).toContain((await fetch(url)).status);

  // Shown once: back on the page, the token is listed without its secret.
  await admin.reload();
  await admin.getByTestId('feeds').locator('tr', { hasText: 'edge' }).getByRole('button', { name: 'edge' }).click();
  await expect(feed.locator('tr', { hasText: 'pfsense' })).toContainText('revoked');
  await expect(feed.getByTestId('feed-token')).toHaveCount(0);
  await expect(feed).not.toContainText(secret);
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
    ['sharing', 'sharing'],
    ['defence', 'defence'],
    ['protected', 'protected'],
    ['feeds', 'feeds'],
    ['address', 'addresses/198.51.100.61'],
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
