#!/usr/bin/env bash
# Builds the banhub and banhub-agent Debian packages, installs them with dpkg on this machine,
# checks what they installed (files, conffiles, the system user, `systemd-analyze verify` and the
# offline security score of the units, the binaries' --version, the shipped configuration parses),
# then purges them and checks that nothing is left but what policy keeps (the `banhub` system user).
#
#   deploy/packaging/check.sh            package the binaries of target/debug (CI: reuses the
#                                        `cargo build --workspace` step, so this takes seconds)
#   BANHUB_DEB_PROFILE=release deploy/packaging/check.sh
#                                        build and package release binaries (what you ship; ~6 min
#                                        cold on 2 cores)
#
# Needs root (dpkg -i), cargo-deb (.ci/deps.d/50-packaging.sh) and systemd-analyze (Debian package
# `systemd`; it works without systemd running as PID 1). Refuses to run when banhub or banhub-agent
# is already installed from a package, so it never removes somebody's real installation.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
profile=${BANHUB_DEB_PROFILE:-dev}
out=$(mktemp -d "${TMPDIR:-/tmp}/banhub-debs.XXXXXX")
packages=(banhub banhub-agent)

say() { printf 'packages: %s\n' "$*"; }
fail() {
  printf 'packages: FAILED: %s\n' "$*" >&2
  exit 1
}

[ "$(id -u)" = 0 ] || fail "run as root (dpkg -i installs the packages)"
command -v cargo-deb >/dev/null 2>&1 || fail "cargo-deb is missing; install it with .ci/deps.d/50-packaging.sh (or: cargo install cargo-deb --version 3.8.0 --locked)"
command -v systemd-analyze >/dev/null 2>&1 || fail "systemd-analyze is missing; install the Debian package systemd (.ci/deps.d/50-packaging.sh)"
for package in "${packages[@]}"; do
  if dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'installed'; then
    fail "$package is already installed on this machine; this check installs and purges its own copy, so remove it first (dpkg -P $package)"
  fi
done

installed=0
cleanup() {
  local status=$?
  if [ "$installed" = 1 ]; then
    say "purging after a failure"
    dpkg -P "${packages[@]}" >/dev/null 2>&1 || true
  fi
  rm -rf "$out"
  exit "$status"
}
trap cleanup EXIT

# --- build ---------------------------------------------------------------------------------------
started=$SECONDS
cd "$root"
case "$profile" in
  dev)
    # The debug build CI made moments ago; cargo-deb strips it. The dev profile is what the test suite
    # ran, and packaging it costs seconds instead of a second full build.
    for bin in banhub banhub-agent; do
      [ -x "target/debug/$bin" ] || fail "target/debug/$bin is missing; run cargo build --workspace first"
    done
    build_args=(--profile dev --no-build --fast)
    ;;
  *) build_args=(--profile "$profile" --locked) ;;
esac
for package in "${packages[@]}"; do
  cargo deb -q -p "$package" "${build_args[@]}" -o "$out" 2>&1 |
    grep -v -e 'dev profile is not supported' -e 'To enable debug symbols' || true
done
hub_deb=$(ls "$out"/banhub_*.deb)
agent_deb=$(ls "$out"/banhub-agent_*.deb)
say "built $(basename "$hub_deb") ($(du -h "$hub_deb" | cut -f1)) and $(basename "$agent_deb") ($(du -h "$agent_deb" | cut -f1)) in $((SECONDS - started))s"

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)

# --- install -------------------------------------------------------------------------------------
installed=1
DEBIAN_FRONTEND=noninteractive dpkg -i "$hub_deb" "$agent_deb" >"$out/dpkg-install.log" 2>&1 ||
  { cat "$out/dpkg-install.log"; fail "dpkg -i"; }
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}\n' "$package" | grep -qx 'install ok installed' ||
    fail "$package is not fully installed: $(dpkg-query -W -f='${Status}' "$package")"
done
say "installed with dpkg -i"

expect_file() { [ -e "$1" ] || fail "$1 was not installed"; }
for path in /usr/bin/banhub /usr/bin/banhub-agent \
  /usr/lib/systemd/system/banhub.service /usr/lib/systemd/system/banhub-agent.service \
  /etc/banhub/banhub.toml /etc/banhub-agent/agent.toml /var/lib/banhub-agent; do
  expect_file "$path"
done
grep -qx /etc/banhub/banhub.toml /var/lib/dpkg/info/banhub.conffiles || fail "banhub.toml is not a conffile"
grep -qx /etc/banhub-agent/agent.toml /var/lib/dpkg/info/banhub-agent.conffiles || fail "agent.toml is not a conffile"
getent passwd banhub >/dev/null || fail "the banhub system user was not created"
[ "$(stat -c '%U:%G %a' /etc/banhub/banhub.toml)" = "root:banhub 640" ] ||
  fail "/etc/banhub/banhub.toml is $(stat -c '%U:%G %a' /etc/banhub/banhub.toml), not root:banhub 640"

# --- the binaries --------------------------------------------------------------------------------
hub_version=$(/usr/bin/banhub --version)
agent_version=$(/usr/bin/banhub-agent --version)
[ "$hub_version" = "banhub $version" ] || fail "banhub --version printed '$hub_version', not 'banhub $version'"
[ "$agent_version" = "banhub-agent $version" ] || fail "banhub-agent --version printed '$agent_version'"
say "$hub_version; $agent_version"
# The shipped configuration files are valid for the shipped binaries (run as the service user would).
runuser -u banhub -- /usr/bin/banhub --config /etc/banhub/banhub.toml config >"$out/hub-config.toml" ||
  fail "the hub refuses /etc/banhub/banhub.toml"
grep -q '^data_dir = "/var/lib/banhub"' "$out/hub-config.toml" || fail "the hub's effective data_dir is not /var/lib/banhub"
# The agent has no `config` command; `enroll` with a malformed token parses the configuration first
# (exit 2 would mean the file is refused) and then fails on the token (exit 1), changing nothing.
set +e
/usr/bin/banhub-agent --config /etc/banhub-agent/agent.toml enroll not-a-token \
  --state-dir "$out/agent-state" >"$out/agent-enroll.log" 2>&1
agent_status=$?
set -e
[ "$agent_status" = 1 ] || { cat "$out/agent-enroll.log"; fail "banhub-agent with /etc/banhub-agent/agent.toml exited $agent_status (2: configuration refused)"; }

# --- the units -----------------------------------------------------------------------------------
for unit in banhub.service banhub-agent.service; do
  # `verify` loads the unit as systemd would (directives, ExecStart binary, user) without needing
  # systemd as PID 1; any message is a finding.
  if ! systemd-analyze verify "/usr/lib/systemd/system/$unit" >"$out/verify.log" 2>&1 ||
    grep -v -e '^$' "$out/verify.log" | grep -q .; then
    cat "$out/verify.log"
    fail "systemd-analyze verify $unit"
  fi
  systemd-analyze security --offline=true --no-pager "/usr/lib/systemd/system/$unit" >"$out/security.log" 2>&1 ||
    { cat "$out/security.log"; fail "systemd-analyze security $unit"; }
  score=$(sed -n 's/.*Overall exposure level for .*: \([0-9.]*\) .*/\1/p' "$out/security.log")
  say "$unit: systemd-analyze verify clean; exposure $score ($(sed -n 's/.*Overall exposure level for .*: [0-9.]* \(.*\)/\1/p' "$out/security.log" | tr -cd '[:alnum:] '))"
  # Hardening regressions show up here: the hub runs as its own user with nothing, the agent as root
  # without capabilities (fail2ban's socket and configuration are root's).
  case "$unit" in
    banhub.service) limit=2.0 ;;
    *) limit=4.0 ;;
  esac
  awk -v s="$score" -v l="$limit" 'BEGIN { exit !(s != "" && s <= l) }' ||
    { cat "$out/security.log"; fail "$unit exposure $score is above $limit"; }
done

# --- purge ---------------------------------------------------------------------------------------
dpkg -P "${packages[@]}" >"$out/dpkg-purge.log" 2>&1 || { cat "$out/dpkg-purge.log"; fail "dpkg -P"; }
installed=0
for package in "${packages[@]}"; do
  if dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'installed'; then
    fail "$package is still known to dpkg after purge"
  fi
done
for path in /usr/bin/banhub /usr/bin/banhub-agent /usr/lib/systemd/system/banhub.service \
  /usr/lib/systemd/system/banhub-agent.service /etc/banhub /etc/banhub-agent /var/lib/banhub \
  /var/lib/banhub-agent /usr/share/doc/banhub /usr/share/doc/banhub-agent; do
  [ ! -e "$path" ] || fail "$path is left after dpkg -P"
done
say "purged; nothing left but the banhub system user (kept, as Debian policy recommends)"
say "all package checks passed in $((SECONDS - started))s"
