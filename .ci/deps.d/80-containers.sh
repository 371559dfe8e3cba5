# Containers (tests/tests/e2e/containers.rs): podman and buildah build and run the images, runc runs
# them (crun cannot here; deploy/container/containers.conf picks runc), mmdebstrap makes the Debian
# base image from Debian's packages (no image registry is reachable), podman-compose runs
# deploy/compose.yaml. netavark and aardvark-dns give compose's network its service names.
# Sourced by .ci/install-deps.
apt_install podman buildah runc mmdebstrap podman-compose netavark aardvark-dns
