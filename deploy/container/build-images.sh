#!/usr/bin/env bash
# Builds the three images CI runs, without a Rust toolchain in any image and without an image
# registry: the hub and the agent from the binaries cargo built on this machine (`--target
# prebuilt`), PostgreSQL from Debian's package, all on one Debian base made by base-image.sh.
# Prints each image's size.
#   deploy/container/build-images.sh [PROFILE]     (default debug: target/debug)
# Images: localhost/banhub-ci/{hub,agent,postgres}:latest.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
profile=${1:-debug}
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$root/$target ;; esac
base=localhost/banhub-ci/debian:bookworm-slim
prefix=localhost/banhub-ci

for tool in buildah podman strip; do
  command -v "$tool" >/dev/null || {
    echo "build-images: $tool is missing; install it with .ci/install-deps" >&2
    exit 1
  }
done
for binary in banhub banhub-agent; do
  [ -x "$target/$profile/$binary" ] || {
    echo "build-images: $target/$profile/$binary is missing; build it with cargo build --workspace" >&2
    exit 1
  }
done

"$here/base-image.sh" "$base"
# Working containers an interrupted build left behind on this base.
buildah containers --quiet --filter ancestor="$base" | xargs --no-run-if-empty buildah rm >/dev/null

# The binaries without their debugging symbols, in a directory of their own: the build context
# `binaries` of the prebuilt stage.
binaries=$(mktemp -d)
logs=$(mktemp -d)
trap 'rm -rf "$binaries" "$logs"' EXIT
for binary in banhub banhub-agent; do
  strip -o "$binaries/$binary" "$target/$profile/$binary"
done

# The three builds run side by side (they mostly wait for Debian's mirror and the disk); each one's
# output goes to a log that is printed if it fails.
build() {
  local name=$1
  shift
  local started=$SECONDS
  # chroot isolation: RUN steps work without the kernel features a nested runtime would need.
  # --layers keeps each step, so a second build on the same machine only repeats what changed.
  if buildah bud --quiet --isolation chroot --layers --format docker \
    --build-arg BASE_IMAGE="$base" -t "$prefix/$name:latest" "$@" >"$logs/$name.log" 2>&1; then
    echo "build-images: built $prefix/$name:latest in $((SECONDS - started))s"
  else
    echo "build-images: building $prefix/$name:latest failed:" >&2
    tail -n 40 "$logs/$name.log" >&2
    return 1
  fi
}
# The prebuilt stages read nothing from the main context, so it is this small directory.
build hub -f "$here/Containerfile.hub" --target prebuilt --build-context binaries="$binaries" "$here" &
hub=$!
build agent -f "$here/Containerfile.agent" --target prebuilt --build-context binaries="$binaries" "$here" &
agent=$!
build postgres -f "$here/Containerfile.postgres" "$here" &
postgres=$!
failed=0
for pid in "$hub" "$agent" "$postgres"; do
  wait "$pid" || failed=1
done
[ "$failed" -eq 0 ] || exit 1

for name in hub agent postgres; do
  size=$(podman image inspect --format '{{.Size}}' "$prefix/$name:latest")
  printf 'build-images: %s:latest is %s MB\n' "$prefix/$name" "$((size / 1000000))"
done
