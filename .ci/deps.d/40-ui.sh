# The web UI (hub/ui): its npm packages (Vite, Svelte, vitest, openapi-typescript, @playwright/test)
# from the committed package-lock.json, and Debian's Chromium for the Playwright tests (Playwright's
# own browser download is never used). Sourced by .ci/install-deps.
apt_install chromium
# A CJK font (WenQuanYi Micro Hei, a few MB): without one Chromium draws the Japanese and Chinese
# pages and their screenshots as empty boxes.
apt_install fonts-wqy-microhei
if [ ! -x /usr/bin/chromium ]; then
  log "chromium was installed but /usr/bin/chromium is missing" >&2
  exit 1
fi
if ! command -v npm >/dev/null 2>&1; then
  log "npm is missing: install Node.js 20 or newer (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
# npm ci runs when the lock file changed since the last one (a stamp in node_modules), so a second
# run costs nothing.
lock_sum=$(sha256sum hub/ui/package-lock.json | cut -d' ' -f1)
if [ "$(cat hub/ui/node_modules/.banhub-lock.sha256 2>/dev/null)" != "$lock_sum" ]; then
  log "npm ci in hub/ui"
  (cd hub/ui && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund)
  printf '%s\n' "$lock_sum" >hub/ui/node_modules/.banhub-lock.sha256
else
  log "hub/ui/node_modules matches package-lock.json"
fi
