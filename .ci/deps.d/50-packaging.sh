# Deployment checks. deploy/packaging/check.sh: cargo-deb (pinned, so that its behaviour does not
# change under us: it warns that the dev profile CI packages will one day be refused),
# systemd-analyze (Debian package systemd; it works without systemd as PID 1) and adduser for the
# packages' maintainer scripts. tests/tests/e2e/deploy_files.rs: python3-yaml parses deploy/compose.yaml.
# Sourced by .ci/install-deps.
CARGO_DEB_VERSION=3.8.0
apt_install systemd adduser python3-yaml
if [ "$(cargo deb --version 2>/dev/null | awk '{print $NF}')" != "$CARGO_DEB_VERSION" ]; then
  log "installing cargo-deb $CARGO_DEB_VERSION (about 2 minutes on 2 cores)"
  cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked
else
  log "cargo-deb $CARGO_DEB_VERSION present"
fi
