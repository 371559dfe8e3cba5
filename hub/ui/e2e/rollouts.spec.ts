// The rollout page in Chromium against the real fleet of tests/tests/e2e/ui_browser.rs (a hub and two
// agents beside real fail2ban servers): an admin rolls a profile version out from the page, the form
// refuses a bad field before sending anything, the canary host is confirmed and the progress view
// follows the rollout to its end without a reload. The profile writes a disabled jail of its own, so
// nothing the other specs watch changes; the servers' labels are removed at the end. Then the page
// in German (the UI's language as `banhub.locale` remembers it), English again afterwards.
import { expect, test, type Page } from '@playwright/test';
import { env, localLogin, oidcLogin } from './env';

test.describe.configure({ mode: 'serial' });

const PROFILE = 'e2e-rollout';
const LABELS = { rollout: 'e2e' };
const FILE = { path: 'jail.d/e2e-rollout.local', content: '[e2e-rollout]\nenabled = false\n' };

let admin: Page;

/** A request from inside the page, with its session cookie; fails the test on any refusal. */
async function api(page: Page, method: string, path: string, body?: unknown): Promise<unknown> {
  const answer = await page.evaluate(
    async ({ method, path, body }) => {
      const response = await fetch(path, {
        method,
        headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        credentials: 'same-origin',
      });
      return { status: response.status, text: await response.text() };
    },
    { method, path, body },
  );
  expect(answer.status, `${method} ${path}: ${answer.text}`).toBeLessThan(300);
  return answer.text ? JSON.parse(answer.text) : undefined;
}

const pages = (page: Page) => page.getByRole('navigation', { name: 'Pages' });

test.beforeAll(async ({ browser }) => {
  const context = await browser.newContext({ baseURL: env.hub });
  admin = await context.newPage();
  if (env.login === 'oidc') await oidcLogin(admin, env.admin);
  else await localLogin(admin, env.admin, env.adminPassword);
  for (const server of [env.serverA, env.serverB]) {
    await api(admin, 'PUT', `api/servers/${encodeURIComponent(server)}/labels`, { labels: LABELS });
  }
  await api(admin, 'POST', 'api/profiles', { name: PROFILE, labels: LABELS, comment: 'e2e rollout', files: [FILE] });
  // The page reads the servers' new labels afresh.
  await admin.goto('./');
});

// Without the label no server is assigned the profile any more, so no drift of it is reported to
// the other specs; the profile itself stays, with the rollout that refers to it.
test.afterAll(async () => {
  await admin.evaluate(() => localStorage.removeItem('banhub.locale'));
  for (const server of [env.serverA, env.serverB]) {
    await api(admin, 'PUT', `api/servers/${encodeURIComponent(server)}/labels`, { labels: {} });
  }
  // Ends this suite's session on the hub, so the harness finds only the sessions ui.spec.ts leaves.
  // With OIDC the hub answers with a redirect to the provider, which a fetch does not follow.
  const answer = await admin.evaluate(async () => {
    const response = await fetch('auth/logout', { method: 'POST', credentials: 'same-origin', redirect: 'manual' });
    return { type: response.type, status: response.status };
  });
  expect(answer.type === 'opaqueredirect' || (answer.status >= 200 && answer.status < 300), JSON.stringify(answer)).toBe(true);
  await admin.context().close();
});

test('the form refuses a bad batch size at its field and sends nothing', async () => {
  await pages(admin).getByRole('link', { name: 'Rollouts', exact: true }).click();
  await expect(admin.getByRole('heading', { name: 'Rollouts', level: 1 })).toBeVisible();
  const form = admin.getByTestId('rollout-form');
  await form.locator('select[name=rollout-profile]').selectOption(PROFILE);
  await expect(form.locator('select[name=rollout-version]')).toHaveValue('1');
  await expect(form).toContainText('Every server the profile is assigned to (2');
  const before = ((await api(admin, 'GET', 'api/rollouts')) as { items: unknown[] }).items.length;
  await form.locator('input[name=rollout-batch]').fill('0');
  await form.getByRole('button', { name: 'Roll out version 1' }).click();
  const field = form.locator('[data-field=batchSize]');
  await expect(field.getByRole('alert')).toHaveText('From 1 to 100.');
  await expect(form.locator('input[name=rollout-batch]')).toHaveAttribute('aria-invalid', 'true');
  const after = ((await api(admin, 'GET', 'api/rollouts')) as { items: unknown[] }).items.length;
  expect(after).toBe(before);
});

test('an admin rolls a version out: the canary is confirmed, then every host, live', async () => {
  const form = admin.getByTestId('rollout-form');
  await form.locator('input[name=rollout-canary]').fill('1');
  await form.locator('input[name=rollout-batch]').fill('1');
  await form.locator('input[name=rollout-watch]').fill('2');
  await form.locator('input[name=rollout-confirm]').fill('10');
  // Marks this page load: the progress must arrive by polling, not through a reload.
  await admin.evaluate(() => ((window as unknown as { __sameLoad: boolean }).__sameLoad = true));
  await form.getByRole('button', { name: 'Roll out version 1' }).click();

  const progress = admin.getByTestId('rollout-progress');
  await expect(progress.getByRole('heading', { name: `${PROFILE} v1` })).toBeVisible();
  const hosts = progress.getByTestId('rollout-hosts');
  await expect(hosts.locator('tbody tr')).toHaveCount(2);
  const canary = hosts.locator('tbody tr', { hasText: 'canary' });
  await expect(canary).toHaveCount(1);
  await expect(canary).toHaveAttribute('data-state', 'confirmed', { timeout: 60_000 });
  await expect(canary.locator('.badge')).toHaveText('confirmed');
  // The canary's watch passed its checks, each shown with its detail.
  await expect(canary).toContainText('agent connected');
  await expect(canary).toContainText('jails running');
  await expect(canary.getByRole('link', { name: 'view' })).toHaveAttribute('href', /config-changes\//);

  await expect(progress.getByTestId('rollout-state')).toHaveText('succeeded', { timeout: 60_000 });
  await expect(progress.getByTestId('rollout-summary')).toContainText('2 of 2 hosts confirmed');
  await expect(hosts.locator('tbody tr[data-state=confirmed]')).toHaveCount(2);
  expect(await admin.evaluate(() => (window as unknown as { __sameLoad?: boolean }).__sameLoad)).toBe(true);
  // Finished, it is no longer stoppable, and the past rollouts list it as succeeded.
  await expect(progress.getByRole('button', { name: 'Stop' })).toHaveCount(0);
  const row = admin.getByTestId('rollouts').locator('tbody tr', { hasText: `${PROFILE} v1` }).first();
  await expect(row).toContainText('succeeded');
});

test('the rollouts page in German: heading, form labels, the past rollout and its progress', async () => {
  await admin.evaluate(() => localStorage.setItem('banhub.locale', 'de'));
  await admin.goto('rollouts');
  await expect(admin.getByRole('heading', { name: 'Rollouts', level: 1 })).toBeVisible();
  await expect(admin.locator('html')).toHaveAttribute('lang', 'de');
  await expect(admin.getByRole('navigation', { name: 'Seiten' }).getByRole('link', { name: 'Rollouts', exact: true })).toBeVisible();

  const form = admin.getByTestId('rollout-form');
  await expect(form.getByRole('heading', { name: 'Profilversion ausrollen' })).toBeVisible();
  await expect(form.getByLabel('Kanarien-Hosts')).toHaveAttribute('name', 'rollout-canary');
  await expect(form.getByLabel('Gruppengröße')).toHaveAttribute('name', 'rollout-batch');
  await expect(form.getByLabel('Beobachtung (Sekunden)')).toHaveAttribute('name', 'rollout-watch');
  await expect(form.getByLabel('Bestätigungsfrist (Sekunden)')).toHaveAttribute('name', 'rollout-confirm');
  await expect(form.getByLabel('Faktor der Sperrrate')).toHaveAttribute('name', 'rollout-factor');
  await form.locator('select[name=rollout-profile]').selectOption(PROFILE);
  await expect(form.locator('select[name=rollout-version]')).toHaveValue('1');
  await expect(form).toContainText('Alle Server, denen das Profil zugewiesen ist (2');
  // The form's own check, in German, before anything is sent.
  await form.locator('input[name=rollout-batch]').fill('0');
  await form.getByRole('button', { name: 'Version 1 ausrollen' }).click();
  await expect(form.locator('[data-field=batchSize]').getByRole('alert')).toHaveText('Von 1 bis 100.');

  // The past rollout, opened from the list: its state and summary in German.
  const list = admin.getByTestId('rollouts');
  await expect(list.getByRole('columnheader', { name: 'Gestartet' })).toBeVisible();
  const row = list.locator('tbody tr', { hasText: `${PROFILE} v1` }).first();
  await expect(row).toContainText('erfolgreich');
  await row.getByRole('button', { name: 'Öffnen' }).click();
  const progress = admin.getByTestId('rollout-progress');
  await expect(progress.getByRole('heading', { name: `${PROFILE} v1` })).toBeVisible();
  await expect(progress.getByTestId('rollout-state')).toHaveText('erfolgreich');
  await expect(progress.getByTestId('rollout-summary')).toContainText('2 von 2 Hosts bestätigt');
  await expect(progress.getByTestId('rollout-hosts').getByRole('columnheader', { name: 'Prüfungen' })).toBeVisible();

  // English again, for what follows.
  await admin.evaluate(() => localStorage.removeItem('banhub.locale'));
  await admin.reload();
  await expect(admin.getByTestId('rollout-form').getByRole('heading', { name: 'Roll out a profile version' })).toBeVisible();
  await expect(admin.locator('html')).toHaveAttribute('lang', 'en');
});
