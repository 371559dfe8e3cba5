// The local administrator's login form in Chromium, against a real hub in local mode (no OIDC)
// started by tests/tests/e2e/ui_browser.rs with its address in BANHUB_URL and the administrator's
// password in BANHUB_ADMIN_PASSWORD. The main suite (ui.spec.ts) signs in through the OIDC provider.
import { expect, test } from '@playwright/test';

function need(name: string): string {
  const value = process.env[name];
  if (!value) {
    throw new Error(
      `${name} is not set: run \`cargo nextest run -p banhub-tests --test e2e -E 'test(/^ui_browser::/)'\` (it starts the hub)`,
    );
  }
  return value;
}

const hub = need('BANHUB_URL').replace(/\/?$/, '/');
const password = need('BANHUB_ADMIN_PASSWORD');

test('the local administrator signs in with the form, and out again', async ({ page }) => {
  await page.goto(hub);
  await page.waitForURL(/\/login\?return_to=/);
  await page.locator('input[name=username]').fill('admin');
  await page.locator('input[name=password]').fill('not the password');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByRole('alert')).toHaveText('Wrong user name or password.');

  await page.locator('input[name=password]').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByRole('heading', { name: 'Dashboard', level: 1 })).toBeVisible();
  await expect(page.locator('header .badge', { hasText: 'admin' })).toBeVisible();

  await page.getByRole('button', { name: 'Log out' }).click();
  await page.waitForURL(/\/login/);
  await page.goto(`${hub}servers`);
  await page.waitForURL(/\/login\?return_to=%2Fservers/);
  await expect(page.locator('input[name=username]')).toBeVisible();
});
