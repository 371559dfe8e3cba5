# Debian packaging (deploy/packaging/check.sh): cargo-deb, pinned so that its behaviour (it warns
# that the dev profile CI packages will one day be refused) does not change under us; dpkg-dev's
# tools are not needed. systemd-analyze (Debian package systemd) checks the installed units and
# works without systemd as PID 1. Sourced by .ci/install-deps.
CARGO_DEB_VERSION=3.8.0
apt_install systemd adduser
if [ "$(cargo deb --version 2>/dev/null | awk '{print $NF}')" != "$CARGO_DEB_VERSION" ]; then
  log "installing cargo-deb $CARGO_DEB_VERSION (about 2 minutes on 2 cores)"
  cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked
else
  log "cargo-deb $CARGO_DEB_VERSION present"
fi
