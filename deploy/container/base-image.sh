#!/usr/bin/env bash
# Makes the Debian base image the CI builds every banhub image from, out of Debian's packages alone
# (mmdebstrap; no image registry needed): minbase, merged /usr, no documentation, like the public
# debian:bookworm-slim. Does nothing when the image is already there, so a machine makes it once.
#   deploy/container/base-image.sh [IMAGE]      (default localhost/banhub-ci/debian:bookworm-slim)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
image=${1:-localhost/banhub-ci/debian:bookworm-slim}

# One maker at a time: CI starts this early in the background, and the container test calls it
# again, to wait for it or to find the image made.
exec 9>"${TMPDIR:-/tmp}/banhub-base-image.lock"
flock 9

if podman image exists "$image"; then
  echo "base-image: $image is there"
  exit 0
fi
for tool in mmdebstrap podman; do
  command -v "$tool" >/dev/null || {
    echo "base-image: $tool is missing; install it with .ci/install-deps" >&2
    exit 1
  }
done

started=$SECONDS
# The tar goes straight into podman. The dpkg options stay in the image's configuration, so the
# image builds on this base also leave documentation out, and skip dpkg's sync of every unpacked
# file (force-unsafe-io): a build's layer is written when it is committed, so those syncs only wait.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! mmdebstrap --quiet --variant=minbase \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt=force-unsafe-io \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  bookworm - 2>"$log" |
  podman import --quiet - "$image" >/dev/null; then
  tail -n 40 "$log" >&2
  echo "base-image: making $image failed" >&2
  exit 1
fi
echo "base-image: made $image in $((SECONDS - started))s"
