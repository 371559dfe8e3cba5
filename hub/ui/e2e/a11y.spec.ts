// Accessibility in Chromium against the real fleet of tests/tests/e2e/ui_browser.rs: axe-core audits
// every page of the UI (and the forms that open on them) with the WCAG 2.1 A and AA rules, in English
// and German, light and dark, and fails on any serious or critical violation; then each page is walked
// by keyboard: "Skip to content" first, every control reached in document order with a visible focus
// indicator, no trap, the navigation followed by Enter, forms submitted by Enter, and the forms that
// open on a button closed by Escape with focus back on their opener. It changes nothing on the hub.
import { expect, test, type Page } from '@playwright/test';
import type { AxeResults, RunOptions } from 'axe-core';
import { mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { env, localLogin, oidcLogin } from './env';

test.describe.configure({ mode: 'serial' });

const WCAG = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'];
/** axe-core's browser script, put into each page once and run there for every look at it. */
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
/** The address page shows the one address the lookup server knows, so its lookups are filled in. */
const ADDRESS = '8.8.8.8';

/** Every page of src/lib/routes.ts a signed-in admin reaches, by its app-relative path. */
const PAGES: Record<string, string> = {
  dashboard: './',
  servers: 'servers',
  jails: 'jails',
  jail: `jails/${env.jail}`,
  'fleet-jails': 'fleet-jails',
  events: 'events',
  insights: 'insights',
  filters: 'filters',
  settings: 'settings',
  audit: 'audit',
  protected: 'protected',
  feeds: 'feeds',
  sharing: 'sharing',
  address: `addresses/${ADDRESS}`,
  defence: 'defence',
  profiles: 'profiles',
  rollouts: 'rollouts',
  'not-found': 'no-such-page',
};

/** The forms that open on a button: the page, the button's test id, the form. */
const FORMS = [
  { page: 'settings', opener: 'add-rule', form: '[data-testid=alert-rule-form]' },
  { page: 'jails', opener: 'new-jail-open', form: '[data-testid=new-jail]' },
];

let page: Page;

/** Opens a page and waits until it shows its data: a heading and nothing left loading. */
async function open(target: Page, path: string): Promise<void> {
  await target.goto(path);
  await expect(target.locator('main h1').first()).toBeVisible();
  await expect(target.locator('main .loading')).toHaveCount(0);
}

/** The serious and critical WCAG 2.1 A/AA violations axe finds on the page as it is, one line each;
 * `rules` narrows the audit to those rules. */
async function audit(target: Page, where: string, rules?: string[]): Promise<string[]> {
  if (!(await target.evaluate(() => 'axe' in window))) await target.evaluate(AXE);
  const options: RunOptions = {
    runOnly: rules ? { type: 'rule', values: rules } : { type: 'tag', values: WCAG },
    resultTypes: ['violations'],
  };
  const result = await target.evaluate(
    (opts) => (window as unknown as { axe: { run: (c: Document, o: RunOptions) => Promise<AxeResults> } }).axe.run(document, opts),
    options,
  );
  const found = result.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${where}: ${v.id} (${v.impact}) at ${v.nodes.map((n) => n.target.join(' ')).join(', ')} — ${v.help} ${v.helpUrl}`);
  for (const line of found) console.log(line);
  return found;
}

/** Sets the language and theme the UI reads from this browser's storage at its next load. */
async function choose(target: Page, locale: string, theme: string): Promise<void> {
  await target.evaluate(
    ([l, th]) => {
      localStorage.setItem('banhub.locale', l);
      localStorage.setItem('banhub.theme', th);
    },
    [locale, theme],
  );
}

test.beforeAll(async ({ browser }) => {
  page = await (await browser.newContext({ baseURL: env.hub })).newPage();
  if (env.login === 'oidc') await oidcLogin(page, env.admin);
  else await localLogin(page, env.admin, env.adminPassword);
});

test.afterAll(async () => {
  await page.evaluate(() => {
    localStorage.removeItem('banhub.locale');
    localStorage.removeItem('banhub.theme');
  });
  // Ends this suite's session, so the harness finds only the sessions ui.spec.ts leaves. With OIDC the
  // hub answers with a redirect to the provider, which a fetch does not follow.
  const status = await page.evaluate(async () => (await fetch('auth/logout', { method: 'POST', redirect: 'manual' })).status);
  expect([0, 200, 204, 303]).toContain(status);
  await page.context().close();
});

/**
 * Audits the page in English and German, light and dark: in the language it shows, then in the
 * other, switched with the header's selector; the theme by `data-theme`; no reload. A theme changes
 * only colours, so the second theme of each language is checked for contrast alone.
 */
async function auditEveryLook(where: string): Promise<string[]> {
  const shown = (await page.locator('html').getAttribute('lang')) === 'de' ? 'de' : 'en';
  const looks = [
    { locale: shown, theme: 'light', rules: undefined },
    { locale: shown, theme: 'dark', rules: ['color-contrast'] },
    { locale: shown === 'de' ? 'en' : 'de', theme: 'dark', rules: undefined },
    { locale: shown === 'de' ? 'en' : 'de', theme: 'light', rules: ['color-contrast'] },
  ];
  const found: string[] = [];
  for (const { locale, theme, rules } of looks) {
    if (locale !== (await page.locator('html').getAttribute('lang'))) {
      await page.getByTestId('language-select').selectOption(locale);
      await expect(page.locator('html')).toHaveAttribute('lang', locale);
    }
    await page.evaluate((th) => (document.documentElement.dataset.theme = th), theme);
    found.push(...(await audit(page, `${where} (${locale}, ${theme})`, rules)));
  }
  return found;
}

test('every page passes axe in English and German, light and dark, and is walked by keyboard', async ({ browser }) => {
  test.setTimeout(300_000);
  await choose(page, 'en', 'light');
  const found: string[] = [];
  for (const [name, path] of Object.entries(PAGES)) {
    const started = Date.now();
    await open(page, path);
    // The rollout form shows once a profile exists: rollouts.spec.ts, run before this file, leaves one.
    if (name === 'rollouts') await expect(page.getByTestId('rollout-form')).toBeVisible();
    await walk(name);
    found.push(...(await auditEveryLook(name)));
    console.log(`a11y: ${name} in ${Date.now() - started} ms`);
  }
  for (const { page: name, opener, form } of FORMS) {
    await open(page, PAGES[name]);
    await page.getByTestId(opener).click();
    await expect(page.locator(form)).toBeVisible();
    found.push(...(await auditEveryLook(`${name} with ${form}`)));
  }
  // The login page, as a signed-out browser sees it.
  for (const locale of ['en', 'de']) {
    const context = await browser.newContext({ baseURL: env.hub, locale });
    const signedOut = await context.newPage();
    await signedOut.goto('./');
    await signedOut.waitForURL(/\/login\?return_to=/);
    await expect(signedOut.locator('html')).toHaveAttribute('lang', locale);
    await expect(signedOut.locator('main h1').first()).toBeVisible();
    for (const [theme, rules] of [['light', undefined], ['dark', ['color-contrast']]] as const) {
      await signedOut.evaluate((th) => (document.documentElement.dataset.theme = th), theme);
      found.push(...(await audit(signedOut, `login (${locale}, ${theme})`, rules ? [...rules] : undefined)));
    }
    await context.close();
  }
  expect(found, found.join('\n')).toEqual([]);
});

interface Stop {
  /** Whether this is the "Skip to content" link. */
  skip: boolean;
  /** Whether the element comes after the previous stop in the document (or that one is gone). */
  after: boolean;
  what: string;
  indicated: boolean;
}

/**
 * Walks the page, freshly opened, from the top with Tab and checks what a keyboard user meets:
 * "Skip to content" first, then every control in document order, each with a visible focus indicator, until focus comes
 * back round to the skip link (no trap); Enter on the skip link puts focus on `main`.
 */
async function walk(path: string): Promise<void> {
  const { count: expected, extra } = await page.evaluate(() => {
    (window as unknown as { __stops: unknown[] }).__stops = [];
    let previous: HTMLElement | null = null;
    document.addEventListener('focusin', (event) => {
      const el = event.target as HTMLElement;
      const style = getComputedStyle(el);
      const outlined = style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0;
      const after =
        !previous || !previous.isConnected || (previous.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING) !== 0;
      previous = el;
      (window as unknown as { __stops: unknown[] }).__stops.push({
        skip: el.matches('a.skip'),
        after,
        what: `${el.tagName.toLowerCase()} "${(el.getAttribute('aria-label') ?? el.textContent ?? '').trim().slice(0, 40)}"`,
        indicated: outlined || style.boxShadow !== 'none',
      });
    });
    const selector = 'a[href], button, input:not([type=hidden]), select, textarea, summary, [tabindex]';
    const radioGroups = new Set<string>();
    const controls = [...document.querySelectorAll<HTMLElement>(selector)].filter((el) => {
      if (el.tabIndex < 0 || (el as HTMLButtonElement).disabled || !el.checkVisibility({ visibilityProperty: true })) return false;
      if (el instanceof HTMLInputElement && el.type === 'radio') {
        if (radioGroups.has(el.name)) return false;
        radioGroups.add(el.name);
      }
      return true;
    });
    // Tab moves between the parts of a date or time field (day, month, year…) inside the one element.
    const parts = controls.filter((el) => el instanceof HTMLInputElement && /date|time|month|week/.test(el.type)).length;
    return { count: controls.length, extra: parts * 8 };
  });
  // A few presses more than there are controls: the way out of the page and back in, and any
  // scrolling region Chromium makes focusable.
  for (let i = 0; i < expected + extra + 8; i++) await page.keyboard.press('Tab');
  const stops = await page.evaluate(() => (window as unknown as { __stops: Stop[] }).__stops);
  expect(stops[0]?.skip, `${path}: the first Tab stop is ${stops[0]?.what}, not "Skip to content"`).toBe(true);
  const back = stops.findIndex((s, i) => i > 0 && s.skip);
  expect(back, `${path}: Tab never came back to the top: ${stops.map((s) => s.what).join(' → ')}`).toBeGreaterThan(0);
  const round = stops.slice(0, back);
  const unmarked = round.filter((s) => !s.indicated).map((s) => s.what);
  expect(unmarked, `${path}: no visible focus indicator on`).toEqual([]);
  const outOfOrder = round.filter((s) => !s.after).map((s) => s.what);
  expect(outOfOrder, `${path}: Tab went back up the page at`).toEqual([]);
  expect(round.length, `${path}: Tab met ${round.length} of ${expected} controls: ${round.map((s) => s.what).join(' → ')}`).toBeGreaterThanOrEqual(expected);
  await page.locator('a.skip').focus();
  await page.keyboard.press('Enter');
  await expect(page.locator('main#main')).toBeFocused();
}

test('the navigation is followed by Enter', async () => {
  await open(page, PAGES.dashboard);
  const servers = page.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name: 'Servers' });
  for (let i = 0; i < 20 && !(await servers.evaluate((el) => el === document.activeElement)); i++) await page.keyboard.press('Tab');
  await expect(servers).toBeFocused();
  const file = join(dirname(env.screenshots), 'keyboard-focus.png');
  mkdirSync(dirname(file), { recursive: true });
  await page.screenshot({ path: file });
  await page.keyboard.press('Enter');
  await expect(page).toHaveURL(/\/servers$/);
  await expect(page.getByRole('heading', { name: 'Servers', level: 1 })).toBeVisible();
});

test('forms open by keyboard, submit by Enter, and close on Escape with focus back on the opener', async () => {
  for (const { page: name, opener, form } of FORMS) {
    await open(page, PAGES[name]);
    await page.getByTestId(opener).focus();
    await page.keyboard.press('Enter');
    await expect(page.locator(form)).toBeVisible();
    await expect(page.locator(`${form} :focus`), `${name}: focus moved into the form`).toHaveCount(1);
    await page.keyboard.press('Escape');
    await expect(page.locator(form)).toHaveCount(0);
    await expect(page.getByTestId(opener)).toBeFocused();
  }
  // Enter in a field submits its form: the empty rule is refused on its name field, nothing is saved.
  await open(page, PAGES.settings);
  await page.getByTestId('add-rule').focus();
  await page.keyboard.press('Enter');
  const rule = page.locator('[data-testid=alert-rule-form]');
  await rule.locator('input').first().focus();
  await page.keyboard.press('Enter');
  await expect(rule.locator('[aria-invalid=true]').first()).toBeVisible();
  await page.keyboard.press('Escape');
  await expect(rule).toHaveCount(0);
});

test('a confirmation asks by keyboard and Escape takes it back', async () => {
  await open(page, PAGES.servers);
  const row = page.locator(`tr[data-server="${env.serverB}"]`);
  const remove = row.getByRole('button', { name: 'Delete', exact: true });
  await remove.focus();
  await page.keyboard.press('Enter');
  const question = row.getByRole('group');
  await expect(question).toBeVisible();
  await expect(question.getByRole('button', { name: 'Cancel' })).toBeFocused();
  await page.keyboard.press('Escape');
  await expect(question).toHaveCount(0);
  await expect(row.getByRole('button', { name: 'Delete', exact: true })).toBeFocused();
});
