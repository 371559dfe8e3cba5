// What the UI shows in the chosen language beyond its messages, in Chromium against the real fleet of
// tests/tests/e2e/ui_browser.rs, each in two languages at least: pages and locales arrive as chunks
// of their own when first needed (uPlot only with the chart pages), cached for good; the dashboard
// chart's time axis, legend and hovered time in English and German; API states translated (a
// server's status in French and Japanese); counts with plural forms (one server, two servers) in
// English and German; and the end of a timed fleet ban on the address page in German and English.
// Leaves target/ui-e2e/screenshots/uigaps-*.png (the Japanese one shows CJK glyphs, not boxes).
import { expect, test, type BrowserContext, type Page, type Response } from '@playwright/test';
import { bannedOnA, bannedOnB, endSession, env, failLogins, localLogin, oidcLogin, shoot } from './env';

test.describe.configure({ mode: 'serial' });

let context: BrowserContext;
let page: Page;

/** Banned by this suite from log lines, so the dashboard has something to chart. */
const charted = '203.0.113.61';
/** Banned for an hour everywhere from its page, then lifted. */
const timed = '203.0.113.91';

const h1 = (p: Page) => p.getByRole('heading', { level: 1 });
const chunk = (name: string) => new RegExp(`/assets/${name}-[\\w-]+\\.js$`);

/** Chooses the UI's language with the header's switcher and waits until it shows. */
async function speak(locale: string, on: Page = page): Promise<void> {
  await on.getByTestId('language-select').selectOption(locale);
  await expect(on.locator('html')).toHaveAttribute('lang', locale);
}

test.beforeAll(async ({ browser }) => {
  context = await browser.newContext({ baseURL: env.hub, locale: 'en-US' });
  page = await context.newPage();
  if (env.login === 'oidc') await oidcLogin(page, env.admin);
  else await localLogin(page, env.admin, env.adminPassword);
});

test.afterAll(async () => {
  // Back to English and signed out.
  await page.evaluate(() => localStorage.removeItem('banhub.locale'));
  await endSession(page);
  await context.close();
});

test('pages and locales arrive as chunks when first shown, uPlot only with the chart pages', async () => {
  // A page of its own with the browser's cache emptied, so nothing the login page loaded counts.
  const fresh = await context.newPage();
  await (await context.newCDPSession(fresh)).send('Network.clearBrowserCache');
  const scripts: Response[] = [];
  fresh.on('response', (r) => {
    if (/\/assets\/[^/]+\.js$/.test(r.url())) scripts.push(r);
  });
  const fetched = (name: string) => scripts.filter((r) => chunk(name).test(r.url()));

  await fresh.goto('servers');
  await expect(h1(fresh)).toHaveText('Servers');
  expect(fetched('Servers')).toHaveLength(1);
  expect(fetched('Insights')).toHaveLength(0);
  expect(fetched('Chart')).toHaveLength(0);
  // English is in the main chunk: no locale was fetched.
  expect(scripts.filter((r) => /\/assets\/(de|de-CH|fr|es|it|ja|zh|ca)-[\w-]+\.js$/.test(r.url()))).toHaveLength(0);

  // In-app navigation to a chart page brings its chunk and uPlot's, cached for good.
  const insights = fresh.waitForResponse((r) => chunk('Insights').test(r.url()));
  const chart = fresh.waitForResponse((r) => chunk('Chart').test(r.url()));
  await fresh.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name: 'Insights', exact: true }).click();
  for (const response of [await insights, await chart]) {
    expect(response.status()).toBe(200);
    expect(response.headers()['cache-control']).toContain('immutable');
    expect(response.headers()['content-type']).toContain('javascript');
  }
  await expect(h1(fresh)).toHaveText('Insights');

  // German: its messages are one chunk of their own, fetched when chosen; no other locale comes.
  const german = fresh.waitForResponse((r) => chunk('de').test(r.url()));
  await speak('de', fresh);
  expect((await german).status()).toBe(200);
  await expect(h1(fresh)).toHaveText('Analysen');
  await fresh.goto('filters');
  await expect(h1(fresh)).toHaveText(/^Filter/);
  expect(fetched('Filters').length).toBeGreaterThan(0);
  expect(scripts.filter((r) => /\/assets\/(fr|es|it|ja|zh|ca)-[\w-]+\.js$/.test(r.url()))).toHaveLength(0);
  await fresh.close();
});

test('the dashboard chart: time axis, legend and the hovered time in German and English', async () => {
  failLogins(charted, 3);
  await expect.poll(() => bannedOnA(), { timeout: 30_000 }).toContain(charted);

  // German, as chosen in the previous test and remembered.
  await page.goto('./');
  await expect(h1(page)).toHaveText('Übersicht');
  const chart = page.locator('.chart-card .chart');
  // The chart shows once the hub counts the ban (the dashboard refreshes on live events).
  await expect(async () => {
    await page.reload();
    await expect(chart).toHaveAttribute('data-x-ticks', /\d/, { timeout: 3_000 });
  }).toPass({ timeout: 45_000 });
  // 24-hour ticks ("14:00 | 16:00"), no AM/PM.
  await expect(chart).toHaveAttribute('data-x-ticks', /^\d{2}:\d{2}( \| \d{2}:\d{2})*$/);
  const legend = chart.locator('.u-legend');
  await expect(legend).toContainText('Zeit');
  await expect(legend).toContainText('Sperren');
  await expect(legend).toContainText('Entsperrungen');
  await chart.locator('.u-over').hover();
  await expect(legend.locator('.u-series').first().locator('.u-value')).toHaveText(/^\d{2}\.\d{2}\.\d{2}, \d{2}:\d{2}$/);
  await shoot(page, 'uigaps-dashboard-chart-de');

  await speak('en');
  await expect(h1(page)).toHaveText('Dashboard');
  await expect(chart).toHaveAttribute('data-x-ticks', /\d{2}:\d{2}\s[AP]M/);
  await expect(legend).toContainText('Time');
  await expect(legend).toContainText('Unbans');
  await chart.locator('.u-over').hover({ position: { x: 20, y: 20 } });
  await chart.locator('.u-over').hover();
  await expect(legend.locator('.u-series').first().locator('.u-value')).toHaveText(/^\d{1,2}\/\d{1,2}\/\d{2}, \d{1,2}:\d{2}\s[AP]M$/);
});

test('a server state in French and Japanese, and one server or two in English and German', async () => {
  await page.goto('fleet-jails');
  const servers = page.getByTestId('fleet-jail-servers');
  const statusOf = (name: string) => servers.locator(`li[data-server="${name}"] .badge`).first();
  await expect(statusOf(env.serverA)).toHaveText('online');

  // Plurals: one server chosen, then two.
  await page.getByRole('checkbox', { name: `Choose ${env.serverA}` }).check();
  await expect(page.getByRole('button', { name: 'Disable on 1 server', exact: true })).toBeVisible();
  await expect(page.getByRole('button', { name: 'Enable on 1 server', exact: true })).toBeVisible();
  await page.getByRole('checkbox', { name: `Choose ${env.serverB}` }).check();
  await expect(page.getByRole('button', { name: 'Disable on 2 servers', exact: true })).toBeVisible();

  await speak('de');
  await expect(page.getByRole('button', { name: 'Auf 2 Servern deaktivieren', exact: true })).toBeVisible();
  await page.getByRole('checkbox', { name: `${env.serverB} auswählen` }).uncheck();
  await expect(page.getByRole('button', { name: 'Auf 1 Server deaktivieren', exact: true })).toBeVisible();
  await expect(page.getByRole('button', { name: 'Auf 1 Server aktivieren', exact: true })).toBeVisible();

  // The status the API sends as `online`, in the locale's words.
  await speak('fr');
  await expect(statusOf(env.serverA)).toHaveText('en ligne');
  await speak('ja');
  await expect(statusOf(env.serverA)).toHaveText('オンライン');
  await expect(h1(page)).toHaveText('全サーバーのジェイル');
  await shoot(page, 'uigaps-fleet-jails-ja');
});

test('the address page: when a timed fleet ban ends, in German and English', async () => {
  await speak('de');
  await page.goto(`addresses/${timed}`);
  const section = page.getByTestId('address-timed-bans');
  await expect(section.getByRole('heading', { name: 'Zeitlich begrenzte Sperren' })).toBeVisible();
  await expect(section).toContainText('Keine zeitlich begrenzte Sperre betrifft diese Adresse.');

  const form = page.getByTestId('fleet-ban');
  await form.locator('input[name=fleet-jail]').fill(env.jail);
  await form.locator('select[name=fleet-duration]').selectOption('3600');
  await form.getByRole('button', { name: 'Überall sperren', exact: true }).click();
  await expect(page.getByTestId('fleet-ban-result')).toBeVisible();
  await expect.poll(() => bannedOnA().concat(bannedOnB()), { timeout: 30_000 }).toContain(timed);

  // One line for the fleet ban: both servers, its end in German ("27.11.2026, 15:41:07", "in 60 Min.").
  const fleetLine = section.locator('li[data-server="fleet"]');
  await expect(async () => {
    await page.reload();
    await expect(fleetLine).toContainText(env.serverB, { timeout: 3_000 });
  }).toPass({ timeout: 30_000 });
  await expect(fleetLine).toContainText(`Flottensperre auf ${env.serverA}, ${env.serverB}, ${env.jail}: aufgehoben am`);
  await expect(fleetLine).toContainText(/am \d{2}\.\d{2}\.\d{4}, \d{2}:\d{2}:\d{2} \(in (60|59) Min\.\)/);
  const ends = Date.parse((await fleetLine.getAttribute('data-ends')) ?? '');
  expect(Math.abs(ends - Date.now() - 3_600_000)).toBeLessThan(5 * 60_000);
  await shoot(page, 'uigaps-address-timed-de');

  await speak('en');
  await expect(fleetLine).toContainText(`Fleet ban on ${env.serverA}, ${env.serverB}, ${env.jail}: lifted at`);
  await expect(fleetLine).toContainText(/at [A-Z][a-z]{2} \d{1,2}, \d{4}, \d{1,2}:\d{2}:\d{2}\s[AP]M \(in (60|59) min\.\)/);

  // Lifted everywhere again, leaving the fleet as it was.
  await form.getByRole('button', { name: 'Unban everywhere', exact: true }).click();
  await form.getByRole('button', { name: 'Unban everywhere', exact: true }).click(); // confirm
  await expect(page.getByTestId('unban-everywhere-result')).toBeVisible();
  await expect.poll(() => bannedOnA().concat(bannedOnB()), { timeout: 30_000 }).not.toContain(timed);
});
