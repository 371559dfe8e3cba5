// Fleet views and timed bans in Chromium against the real hub and fail2ban servers that
// tests/tests/e2e/ui_browser.rs starts: servers grouped and filtered by label, the fleet jail view
// (its screenshot is target/ui-e2e/fleet-jails.png), a jail disabled on one server from it and
// enabled again, and a timed ban from the jail page and from the fleet-ban form with its end time.
// Everything it changes on the servers is put back at the end, and its session ends.
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { expect, test, type Page } from '@playwright/test';
import { bannedOnA, env, localLogin, oidcLogin, shoot } from './env';

test.describe.configure({ mode: 'serial' });

let page: Page;
const origin = new URL(env.hub).origin;

/** A state-changing API call with the page's session (and the hub's origin, as the UI sends it). */
async function api(method: string, path: string, data?: unknown) {
  const response = await page.request.fetch(path, { method, data, headers: { Origin: origin } });
  expect(response.ok(), `${method} ${path}: ${response.status()} ${await response.text()}`).toBe(true);
  return response.json();
}

/** The jails fail2ban on server B runs now (`fail2ban-client status`). */
function runningOnB(): string {
  return execFileSync('fail2ban-client', ['-c', env.f2bConfB, '-s', env.f2bSockB, 'status'], { encoding: 'utf8' });
}

interface ServerRow {
  id: string;
  name: string;
  labels: Record<string, string>;
}
let servers: ServerRow[] = [];

test.beforeAll(async ({ browser }) => {
  const context = await browser.newContext({ baseURL: env.hub });
  page = await context.newPage();
  if (env.login === 'oidc') await oidcLogin(page, env.admin);
  else await localLogin(page, env.admin, env.adminPassword);
  servers = (await (await page.request.get('api/servers')).json()) as ServerRow[];
  const label = { [env.serverA]: 'prod', [env.serverB]: 'staging' };
  for (const s of servers) await api('PUT', `api/servers/${s.id}/labels`, { labels: { ...s.labels, env: label[s.name] } });
});

test.afterAll(async () => {
  for (const s of servers) await api('PUT', `api/servers/${s.id}/labels`, { labels: s.labels });
  for (const ip of ['198.51.100.201', '198.51.100.202']) {
    await api('POST', 'api/fleet/bans', { ip, unban: true, all: true });
  }
  // The session ends here, so the harness finds only the sessions ui.spec.ts leaves.
  await page.request.post('auth/logout', { headers: { Origin: origin }, maxRedirects: 0 });
  await page.context().close();
});

test('servers are grouped and filtered by label, with their health', async () => {
  await page.goto('servers');
  await page.locator('select[name=group-by]').selectOption('env');
  await expect(page.locator('tr[data-group="env=prod"]')).toContainText('1');
  await expect(page.locator('tr[data-group="env=staging"]')).toBeVisible();
  const rowA = page.locator(`tr[data-server="${env.serverA}"]`);
  await expect(rowA.locator('.badge.online')).toBeVisible();
  await expect(rowA).toContainText('env=prod');
  await page.locator('input[name=label-filter]').fill('env=staging');
  await expect(page.getByTestId('servers-shown')).toHaveText('1 of 2 servers shown');
  await expect(rowA).toHaveCount(0);
  await expect(page.locator(`tr[data-server="${env.serverB}"]`)).toBeVisible();
  await page.locator('input[name=label-filter]').fill('env');
  await expect(page.locator('#label-filter-error')).toBeVisible();
});

test('the fleet jail view lists every jail across the servers', async () => {
  await page.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name: 'Jail overview' }).click();
  await expect(page.getByRole('heading', { name: 'Jails across the fleet', level: 1 })).toBeVisible();
  const row = page.locator(`tr[data-jail="${env.jail}"]`);
  await expect(row.getByTestId('running-on')).toHaveText('2 of 2');
  await expect(row.locator(`[data-server="${env.serverA}"]`)).toBeVisible();
  await expect(row.locator(`[data-server="${env.serverB}"]`)).toBeVisible();
  await expect(page.getByTestId('fleet-jail-servers')).toContainText('answered');
  const file = join(dirname(env.screenshots), 'fleet-jails.png');
  mkdirSync(dirname(file), { recursive: true });
  await page.screenshot({ path: file, fullPage: true });
  await shoot(page, 'fleet-jails');

  // Filtered by label: one server left.
  await page.locator('input[name=fleet-jails-labels]').fill('env=prod');
  await page.getByRole('button', { name: 'Show' }).click();
  await expect(row.getByTestId('running-on')).toHaveText('1 of 1');
  await page.locator('input[name=fleet-jails-labels]').fill('');
  await page.getByRole('button', { name: 'Show' }).click();
  await expect(row.getByTestId('running-on')).toHaveText('2 of 2');
});

test('a jail is disabled on a chosen server from the fleet view and enabled again', async () => {
  expect(runningOnB()).toContain('dummyjail');
  await page.getByRole('checkbox', { name: `Choose ${env.serverB}` }).check();
  await page.locator('input[name=fleet-switch-jail]').fill('dummyjail');
  await page.getByRole('button', { name: 'Disable on 1 server', exact: true }).click();
  await page.getByRole('button', { name: 'Yes, disable' }).click();
  const result = page.getByTestId('fleet-switch-result');
  await expect(result.locator(`[data-server="${env.serverB}"]`)).toHaveText(`${env.serverB}: done`);
  expect(runningOnB()).not.toContain('dummyjail');
  await expect(page.locator('tr[data-jail="dummyjail"]').getByTestId('running-on')).toHaveText('1 of 2');
  await expect(page.locator(`tr[data-jail="dummyjail"] [data-server="${env.serverB}"]`)).toContainText('disabled');

  await page.getByRole('button', { name: 'Enable on 1 server', exact: true }).click();
  await expect(result.locator(`[data-server="${env.serverB}"]`)).toHaveText(`${env.serverB}: done`);
  expect(runningOnB()).toContain('dummyjail');
  await expect(page.locator('tr[data-jail="dummyjail"]').getByTestId('running-on')).toHaveText('2 of 2');
});

test('a timed ban from the jail page and from the fleet-ban form shows when it ends', async () => {
  const select = page.getByTestId('server-select');
  const value = await select.locator('option', { hasText: env.serverA }).getAttribute('value');
  await select.selectOption(value!);
  await page.goto(`jails/${env.jail}`);
  await page.locator('input[name=ban-ip]').fill('198.51.100.201');
  await page.locator('select[name=ban-duration]').selectOption('3600');
  await page.getByRole('button', { name: 'Ban', exact: true }).click();
  await expect(page.getByRole('status').filter({ hasText: 'until' })).toContainText('198.51.100.201');
  await expect(page.locator('tr[data-ip="198.51.100.201"]').getByTestId('timed-end')).toContainText('Lifted by banhub at');
  expect(bannedOnA()).toContain('198.51.100.201');

  await page.goto('servers');
  const form = page.getByTestId('fleet-ban');
  await form.locator('input[name=fleet-ip]').fill('198.51.100.202');
  await form.locator('input[name=fleet-jail]').fill(env.jail);
  await form.locator('select[name=fleet-duration]').selectOption('custom');
  // Longer than a year: the browser lets it through, the hub refuses it.
  await form.locator('input[name=fleet-minutes]').fill('600000');
  await form.getByRole('button', { name: 'Ban everywhere' }).click();
  // A duration out of range is refused at its field; nothing is banned.
  await expect(form.locator('#fleet-ban-durationSecs-error')).toContainText('between');
  expect(bannedOnA()).not.toContain('198.51.100.202');
  await form.locator('select[name=fleet-duration]').selectOption('86400');
  await form.getByRole('button', { name: 'Ban everywhere' }).click();
  await expect(page.getByTestId('fleet-ban-ends')).toContainText('Lifted by banhub at');
  expect(bannedOnA()).toContain('198.51.100.202');
  await shoot(page, 'timed-ban');
});

test('the fleet jail view and the servers grouped by label read German', async () => {
  await page.evaluate(() => localStorage.setItem('banhub.locale', 'de'));
  try {
    await page.goto('fleet-jails');
    await expect(page.getByRole('heading', { name: 'Jails über alle Server', level: 1 })).toBeVisible();
    await expect(page.locator(`tr[data-jail="${env.jail}"]`).getByTestId('running-on')).toHaveText('2 von 2');
    await page.goto('servers');
    await page.locator('input[name=label-filter]').fill('env=staging');
    await expect(page.getByTestId('servers-shown')).toHaveText('1 von 2 Servern gezeigt');
    await expect(page.locator('select[name=group-by]').locator('option').first()).toHaveText('Keine Gruppierung');
  } finally {
    await page.evaluate(() => localStorage.removeItem('banhub.locale'));
  }
});
