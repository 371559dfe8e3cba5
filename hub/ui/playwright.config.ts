// Playwright against a real hub: tests/tests/e2e/ui_browser.rs starts the hub, two agents with fail2ban
// sandboxes, the OIDC provider and the SMTP server, then runs `npx playwright test` here with their
// addresses in BANHUB_* variables. The browser is Debian's Chromium; Playwright downloads nothing.
import { defineConfig } from '@playwright/test';

export default defineConfig({
  testDir: './e2e',
  workers: 1,
  fullyParallel: false,
  forbidOnly: true,
  retries: 0,
  timeout: 90_000,
  expect: { timeout: 20_000 },
  reporter: [['list']],
  outputDir: process.env.BANHUB_UI_ARTIFACTS ? `${process.env.BANHUB_UI_ARTIFACTS}/test-results` : 'test-results',
  use: {
    baseURL: process.env.BANHUB_URL,
    viewport: { width: 1366, height: 860 },
    // The UI follows the browser's language: the suite reads English unless a test chooses another.
    locale: 'en-US',
    screenshot: 'only-on-failure',
    trace: 'off',
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--disable-dev-shm-usage',
      ],
    },
  },
  projects: [{ name: 'chromium', use: { browserName: 'chromium' } }],
});
