# The OpenID provider the OIDC login tests (tests/tests/e2e/oidc.rs, the browser suite) sign in through:
# npm oidc-provider 9 with its development login pages (tests/components/oidc, pinned by its
# package-lock.json), started by tests/src/oidc.rs. Needs Node.js 20+ and npm (Node 20 prints an
# "unsupported runtime" warning and works).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt_install nodejs npm
fi
oidc_dir=tests/components/oidc
# npm ci runs when the lock file changed since the last one (a stamp in node_modules), so a second
# run costs nothing.
oidc_lock_sum=$(sha256sum "$oidc_dir/package-lock.json" | cut -d' ' -f1)
if [ ! -f "$oidc_dir/node_modules/oidc-provider/package.json" ] \
  || [ "$(cat "$oidc_dir/node_modules/.banhub-lock.sha256" 2>/dev/null)" != "$oidc_lock_sum" ]; then
  log "installing oidc-provider in $oidc_dir (npm ci)"
  (cd "$oidc_dir" && npm ci --no-audit --no-fund --loglevel=error)
  printf '%s\n' "$oidc_lock_sum" >"$oidc_dir/node_modules/.banhub-lock.sha256"
else
  log "oidc-provider present in $oidc_dir"
fi
