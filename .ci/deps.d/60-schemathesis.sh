# schemathesis, which checks that the OpenAPI document is exact (tests/schemathesis/run.sh), pinned so
# that a new release's checks do not change the verdict under us. From PyPI with the machine's
# Python 3 and pip (python3-pip on Debian). Sourced by .ci/install-deps.
SCHEMATHESIS_VERSION=4.32.5
if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
  apt_install python3 python3-pip
fi
if [ "$(st --version 2>/dev/null | awk '{print $NF}')" != "$SCHEMATHESIS_VERSION" ]; then
  log "installing schemathesis $SCHEMATHESIS_VERSION (pip)"
  # Debian's own Python refuses a system-wide pip install unless told that this machine is CI's.
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --break-system-packages "schemathesis==$SCHEMATHESIS_VERSION" \
    || python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
      "schemathesis==$SCHEMATHESIS_VERSION"
else
  log "schemathesis $SCHEMATHESIS_VERSION present"
fi
