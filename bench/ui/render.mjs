// `banhub-bench render`'s browser half: signs in to each hub it is given, then loads the dashboard,
// the events page and the servers page again and again in Chromium, cold (a new browser context:
// no cache, a new page) and warm (the same page navigated again), and writes what each load took.
//
// Input (environment): BANHUB_RENDER_TARGETS, a JSON list of {name, url, password};
// BANHUB_RENDER_RUNS, the timed loads per page, temperature and target; BANHUB_RENDER_OUT, the
// JSON file written; BANHUB_UI, the hub UI's directory (its node_modules has playwright-core);
// CHROMIUM_PATH, the browser. Output: one record per timed load, in milliseconds from the
// navigation's start: `firstData` (the page's data condition below first true), `domContentLoaded`,
// and the `api` calls the page made (each request's start and end).
import { createRequire } from 'node:module';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

const ui = process.env.BANHUB_UI;
const require = createRequire(join(ui, 'package.json'));
const { chromium } = require('playwright-core');

const targets = JSON.parse(process.env.BANHUB_RENDER_TARGETS);
const runs = Number(process.env.BANHUB_RENDER_RUNS ?? '15');
const out = process.env.BANHUB_RENDER_OUT;

// What "its first data is on screen" means for each page: every selector matches.
const pages = [
  {
    page: 'dashboard',
    path: '',
    // The fleet's health figures, the last 24 hours' totals and the first row of the ban feed.
    ready: ['[data-testid=fleet-health] .value', '[data-testid=bans-24h]', '[data-testid=live-feed] li'],
    // The floor has no events: its feed and totals are the empty state, which is its data.
    readyEmpty: ['[data-testid=fleet-health] .value', '[data-testid=bans-24h]', '.empty, [data-testid=live-feed] li'],
  },
  {
    page: 'events',
    path: 'events',
    ready: ['table[data-testid=events] tbody tr'],
    readyEmpty: ['.empty, table[data-testid=events] tbody tr'],
  },
  {
    page: 'servers',
    path: 'servers',
    ready: ['table[data-testid=servers] tbody tr td'],
    readyEmpty: ['table[data-testid=servers] tbody tr td'],
  },
];

// Installed before any page script: records when every selector first matches, by watching the
// document change, so the time is that of the rendering, not of a poll.
function watch(selectors) {
  const done = () => selectors.every((s) => document.querySelector(s));
  const mark = () => {
    if (window.__firstData === undefined && done()) window.__firstData = performance.now();
    return window.__firstData !== undefined;
  };
  const start = () => {
    if (mark()) return;
    const observer = new MutationObserver(() => {
      if (mark()) observer.disconnect();
    });
    observer.observe(document, { childList: true, subtree: true, characterData: true, attributes: true });
  };
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
}

const launchArgs = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-dev-shm-usage',
];

async function signIn(browser, target) {
  const context = await browser.newContext({ locale: 'en-US', viewport: { width: 1366, height: 860 } });
  const page = await context.newPage();
  await page.goto(`${target.url}login`);
  await page.locator('input[name=username]').fill('admin');
  await page.locator('input[name=password]').fill(target.password);
  await page.locator('button[type=submit]').click();
  await page.waitForSelector('[data-testid=fleet-health], .empty', { timeout: 60_000 });
  const state = await context.storageState();
  await context.close();
  return state;
}

async function timedLoad(page, url) {
  await page.goto(url, { waitUntil: 'commit' });
  await page.waitForFunction(() => window.__firstData !== undefined, null, { timeout: 60_000, polling: 50 });
  return page.evaluate(() => {
    const nav = performance.getEntriesByType('navigation')[0];
    const api = performance
      .getEntriesByType('resource')
      .filter((r) => new URL(r.name).pathname.startsWith('/api/'))
      .map((r) => ({
        path: new URL(r.name).pathname,
        start: r.startTime,
        end: r.responseEnd,
      }));
    return { firstData: window.__firstData, domContentLoaded: nav.domContentLoadedEventEnd, api };
  });
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
  args: launchArgs,
});
const records = [];
try {
  for (const target of targets) {
    const state = await signIn(browser, target);
    for (const p of pages) {
      const url = `${target.url}${p.path}`;
      const selectors = target.empty ? p.readyEmpty : p.ready;
      const newPage = async (context) => {
        const page = await context.newPage();
        await page.addInitScript(watch, selectors);
        return page;
      };
      const options = { storageState: state, locale: 'en-US', viewport: { width: 1366, height: 860 } };
      // One load before timing, cold, so the hub's own caches (the database's pages) are as warm
      // for the first timed load as for the last.
      {
        const context = await browser.newContext(options);
        await timedLoad(await newPage(context), url);
        await context.close();
      }
      for (let run = 0; run < runs; run++) {
        const context = await browser.newContext(options);
        const record = await timedLoad(await newPage(context), url);
        records.push({ target: target.name, page: p.page, temperature: 'cold', run, ...record });
        await context.close();
      }
      const context = await browser.newContext(options);
      const page = await newPage(context);
      await timedLoad(page, url);
      for (let run = 0; run < runs; run++) {
        const record = await timedLoad(page, url);
        records.push({ target: target.name, page: p.page, temperature: 'warm', run, ...record });
      }
      await context.close();
      console.error(`${target.name} ${p.page}: ${runs} cold and ${runs} warm loads`);
    }
  }
} finally {
  await browser.close();
}
writeFileSync(out, JSON.stringify(records, null, 1));
