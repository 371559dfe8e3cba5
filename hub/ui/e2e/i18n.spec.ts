// The UI in other languages, in Chromium against the real hub of tests/tests/e2e/ui_browser.rs: the
// header's switcher turns the UI German and then Japanese without a reload, the choice survives one,
// dates on a page with data (the audit log after adding and deleting a server) are written as each
// locale writes them, and a browser whose language is French opens in French.
import { expect, test, type BrowserContext, type Page } from '@playwright/test';
import { endSession, env, localLogin, oidcLogin, shoot } from './env';

test.describe.configure({ mode: 'serial' });

let context: BrowserContext;
let page: Page;

const h1 = (p: Page) => p.getByRole('heading', { level: 1 });
const lang = (p: Page) => p.locator('html').getAttribute('lang');

test.beforeAll(async ({ browser }) => {
  context = await browser.newContext({ baseURL: env.hub, locale: 'en-US' });
  page = await context.newPage();
  if (env.login === 'oidc') await oidcLogin(page, env.admin);
  else await localLogin(page, env.admin, env.adminPassword);
});

test.afterAll(async () => {
  // Ends this suite's session on the hub (the French browser shared it).
  await endSession(page);
  await context.close();
});

test('the switcher turns the UI German without a reload, and the choice survives one', async () => {
  await page.goto('./');
  await expect(h1(page)).toHaveText('Dashboard');
  expect(await lang(page)).toBe('en');
  await page.evaluate(() => ((window as unknown as { __sameLoad: boolean }).__sameLoad = true));

  await page.getByTestId('language-select').selectOption('de');
  await expect(h1(page)).toHaveText('Übersicht');
  const nav = page.getByRole('navigation', { name: 'Seiten' });
  await expect(nav.getByRole('link', { name: 'Ereignisse' })).toBeVisible();
  await expect(page.getByRole('button', { name: 'Abmelden' })).toBeVisible();
  expect(await lang(page)).toBe('de');
  expect(await page.evaluate(() => (window as unknown as { __sameLoad?: boolean }).__sameLoad)).toBe(true);

  await page.reload();
  await expect(h1(page)).toHaveText('Übersicht');
  await expect(page.getByTestId('language-select')).toHaveValue('de');
  expect(await lang(page)).toBe('de');
  await shoot(page, 'i18n-dashboard-de');
});

test('German: a server added and deleted on the servers page, the audit log dated as German writes dates', async () => {
  await page.goto('servers');
  await expect(h1(page)).toHaveText('Server');
  await page.getByLabel('Name', { exact: true }).fill('i18n-probe');
  await page.getByRole('button', { name: 'Server hinzufügen' }).click();
  const enrollment = page.getByTestId('enrollment');
  await expect(enrollment.getByRole('heading')).toHaveText('i18n-probe registrieren');
  // "läuft am 27.11.2026, 10:41:07 ab"
  await expect(enrollment).toContainText(/am \d{2}\.\d{2}\.\d{4}, \d{2}:\d{2}:\d{2} ab/);
  await enrollment.getByRole('button', { name: 'Fertig' }).click();

  const row = page.locator('tr[data-server="i18n-probe"]');
  await expect(row.locator('.badge').first()).toHaveText('ausstehend');
  await row.getByRole('button', { name: 'Löschen' }).click();
  await row.getByRole('button', { name: 'Löschen' }).click(); // confirm
  await expect(row).toHaveCount(0);

  await page.goto('audit');
  await expect(h1(page)).toHaveText('Prüfprotokoll');
  const audit = page.getByTestId('audit');
  await expect(audit.getByRole('columnheader', { name: 'Ergebnis' })).toBeVisible();
  await expect(audit.locator('tbody tr').first().locator('td').first()).toHaveText(/^\d{2}\.\d{2}\.\d{4}, \d{2}:\d{2}:\d{2}$/);
});

test('Japanese: the same pages in Japanese, dates written year first', async () => {
  await page.getByTestId('language-select').selectOption('ja');
  await expect(h1(page)).toHaveText('監査ログ');
  expect(await lang(page)).toBe('ja');
  const audit = page.getByTestId('audit');
  await expect(audit.getByRole('columnheader', { name: '結果' })).toBeVisible();
  await expect(audit.locator('tbody tr').first().locator('td').first()).toHaveText(/^\d{4}\/\d{2}\/\d{2} \d{1,2}:\d{2}:\d{2}$/);

  await page.goto('jails');
  await expect(h1(page)).toHaveText(/ の jail$/);
  await expect(page.getByRole('columnheader', { name: '現在 ban 中' })).toBeVisible();
  await page.reload();
  await expect(page.getByTestId('language-select')).toHaveValue('ja');
  await expect(page.getByRole('columnheader', { name: '現在 ban 中' })).toBeVisible();
  await shoot(page, 'i18n-jails-ja');
});

test('a browser whose language is French opens in French', async ({ browser }) => {
  const french = await browser.newContext({
    baseURL: env.hub,
    locale: 'fr-FR',
    storageState: await context.storageState().then((state) => ({ ...state, origins: [] })),
  });
  try {
    const p = await french.newPage();
    await p.goto('./');
    await expect(h1(p)).toHaveText('Tableau de bord');
    expect(await lang(p)).toBe('fr');
    await expect(p.getByTestId('language-select')).toHaveValue('fr');
    await expect(p.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name: "Journal d'audit" })).toBeVisible();
  } finally {
    await french.close();
  }
});
