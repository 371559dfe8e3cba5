// The alert forms in Chromium against the real hub of tests/tests/e2e/ui_browser.rs: an alert rule
// created through its form (the hub's refusal shown at the field, then fixed), its message
// previewed, a test alert sent through real SMTP (maildev) and its result shown; then the same form
// in German (the UI's language as `banhub.locale` remembers it), with a rule scoped by server labels
// (a bad label refused at its field, then shown in the list and again in the form).
import { expect, test, type Page } from '@playwright/test';
import { env, localLogin, mails, oidcLogin, shoot } from './env';

test.describe.configure({ mode: 'serial' });

let admin: Page;

/** Saves SMTP settings pointing at maildev and the recipient, through the API as the signed-in admin. */
async function mailServer(page: Page) {
  const status = await page.evaluate(async (smtpPort) => {
    const current = await (await fetch('api/settings')).json();
    const doc = {
      ...current,
      smtp: { host: '127.0.0.1', port: Number(smtpPort), tls: 'none', from: 'banhub <banhub@example.test>' },
      alerts: { ...current.alerts, recipients: ['ops@example.test'] },
    };
    const response = await fetch('api/settings', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(doc),
    });
    return response.status;
  }, env.smtpPort);
  expect(status).toBe(200);
}

async function openSettings(page: Page) {
  await page.goto('settings');
  await expect(page.getByTestId('alert-rules')).toBeVisible();
}

test.beforeAll(async ({ browser }) => {
  const context = await browser.newContext({ baseURL: env.hub });
  admin = await context.newPage();
  if (env.login === 'oidc') await oidcLogin(admin, env.admin);
  else await localLogin(admin, env.admin, env.adminPassword);
  await mailServer(admin);
});

test('an alert rule is created through its form, previewed, and a test alert arrives', async () => {
  await openSettings(admin);
  const rules = admin.getByTestId('alert-rules');
  await rules.getByRole('button', { name: 'Add a rule' }).click();
  const form = admin.getByTestId('alert-rule-form');
  await form.locator('input[name=rule-name]').fill('ssh bursts');
  await form.locator('input[name=rule-jails]').fill('sshd');
  await form.locator('input[name=rule-spike]').check();
  await form.locator('input[name=rule-spike-bans]').fill('1');
  await form.locator('input[name=rule-spike-window]').fill('300');
  await form.getByRole('button', { name: 'Save rule' }).click();
  // The hub refuses the threshold and names it; the form shows it at that field.
  const bans = form.locator('input[name=rule-spike-bans]');
  await expect(bans).toHaveAttribute('aria-invalid', 'true');
  await expect(form.locator('[data-field$="spike.bans"] .field-error')).toContainText('between 2 and');

  await form.getByRole('combobox', { name: 'Format' }).selectOption('slack');
  await form.getByRole('button', { name: 'Preview the message' }).click();
  await expect(form.getByTestId('alert-preview-subject')).toHaveText('[banhub] ssh bursts: 3 bans on 1 server');
  await expect(form.getByTestId('alert-preview')).toContainText('"blocks"');
  await shoot(admin, 'alert-rule-form');
  await admin.screenshot({ path: `${env.screenshots}/../alert-rule-form.png`, fullPage: true });

  await bans.fill('5');
  await form.getByRole('button', { name: 'Save rule' }).click();
  await expect(form).toHaveCount(0);
  const row = rules.locator('tr[data-rule="ssh bursts"]');
  await expect(row).toContainText('sshd');
  await expect(row).toContainText('5 bans within 300 s');

  const before = (await mails()).length;
  const channels = admin.getByTestId('alert-webhooks');
  await channels.getByRole('button', { name: 'Send a test alert' }).first().click();
  const result = admin.locator('[data-testid=test-alert-result][data-target=email]');
  await expect(result).toContainText('Delivered', { timeout: 30_000 });
  await expect(result).toContainText('250');
  await expect
    .poll(async () => (await mails()).filter((m) => m.subject.startsWith('[banhub] Test alert')).length, { timeout: 30_000 })
    .toBeGreaterThan(0);
  expect((await mails()).length).toBeGreaterThan(before);
});

test('the alert rule form in German', async () => {
  await admin.evaluate(() => localStorage.setItem('banhub.locale', 'de'));
  await openSettings(admin);
  const rules = admin.getByTestId('alert-rules');
  await rules.getByRole('button', { name: 'Regel hinzufügen' }).click();
  const form = admin.getByTestId('alert-rule-form');
  await form.locator('input[name=rule-name]').fill('Wiederholer');
  const labels = form.locator('input[name=rule-labels]');
  await labels.fill('Rolle!=web');
  await form.locator('input[name=rule-repeat]').check();
  await form.locator('input[name=rule-min-bans]').fill('1');
  await form.getByRole('button', { name: 'Regel speichern' }).click();
  // The hub refuses the label key and names the field; the form shows it there.
  await expect(labels).toHaveAttribute('aria-invalid', 'true');
  await expect(form.locator('[data-field$="].labels"] .field-error')).toBeVisible();
  await labels.fill('role=web');
  await form.getByRole('button', { name: 'Regel speichern' }).click();
  await expect(form.locator('input[name=rule-min-bans]')).toHaveAttribute('aria-invalid', 'true');
  await form.getByRole('combobox', { name: 'Sprache der Alarmmeldungen' }).selectOption('de');
  await form.getByRole('button', { name: 'Meldung als Vorschau zeigen' }).click();
  await expect(form.getByTestId('alert-preview-subject')).toHaveText('[banhub] Wiederholer: 3 Sperren auf 1 Server');
  await shoot(admin, 'alert-rule-form-de');
  await form.locator('input[name=rule-min-bans]').fill('3');
  await form.getByRole('button', { name: 'Regel speichern' }).click();
  const row = rules.locator('tr[data-rule="Wiederholer"]');
  await expect(row).toContainText('role=web');
  await row.getByRole('button', { name: 'Bearbeiten' }).click();
  await expect(admin.getByTestId('alert-rule-form').locator('input[name=rule-labels]')).toHaveValue('role=web');
});

test.afterAll(async () => {
  // The rules made here alert on the bans other suites cause; they go.
  await admin.evaluate(async () => {
    localStorage.removeItem('banhub.locale');
    const current = await (await fetch('api/settings')).json();
    const doc = { ...current, alerts: { ...current.alerts, rules: [] } };
    await fetch('api/settings', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(doc) });
    // This suite's session ends here; the main suite counts the sessions it leaves.
    // It answers with a redirect to the provider's end-session page, which is not followed here.
    await fetch('auth/logout', { method: 'POST', redirect: 'manual' });
  });
  await admin.context().close();
});
