# The SMTP server the settings and alert tests send mail to and read back: npm maildev 3
# (tests/components/smtp, pinned by its package-lock.json). Needs Node.js 20+ and npm.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt_install nodejs npm
fi
smtp_dir=tests/components/smtp
if [ ! -x "$smtp_dir/node_modules/.bin/maildev" ] \
  || [ "$smtp_dir/package-lock.json" -nt "$smtp_dir/node_modules/.package-lock.json" ]; then
  log "installing maildev in $smtp_dir (npm ci)"
  (cd "$smtp_dir" && npm ci --no-audit --no-fund --loglevel=error)
else
  log "maildev present in $smtp_dir"
fi
