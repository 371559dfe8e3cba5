#!/usr/bin/env bash
# Installs the banhub agent on a fail2ban host, enrolls it with the hub, attaches banhub's action to
# fail2ban and starts the agent; `--uninstall` takes all of it away again and leaves fail2ban's
# configuration exactly as it was.
#
#   sudo deploy/install-agent.sh --deb banhub-agent_0.1.0-1_amd64.deb TOKEN
#   sudo deploy/install-agent.sh --binary ./banhub-agent TOKEN
#   sudo deploy/install-agent.sh --uninstall
#
# TOKEN is the one-time enrollment token the hub shows when a server is added (web UI: Servers →
# Add, or POST /api/servers); `-` reads it from standard input, which keeps it out of the process
# list and the shell history.
#
# Steps: 1. install the binary (from the .deb, which also brings the systemd unit and
# /etc/banhub-agent/agent.toml, or from a file, copied to --bin-dir); 2. write the agent's
# configuration; 3. `banhub-agent enroll` (key, certificate, hub CA into the state directory);
# 4. `banhub-agent install-action` (banhub's action into fail2ban's configuration, attached to every
# jail, validated by fail2ban first); 5. start the agent: systemd (enabled at boot) when this machine
# runs it, else say how (--no-service), or run it in the foreground (--foreground).
#
# Options:
#   --deb FILE              install the banhub-agent Debian package (dpkg -i)
#   --binary FILE           install this banhub-agent binary into --bin-dir
#                           (default: banhub-agent found on PATH, copied as it is)
#   --bin-dir DIR           where --binary goes                       (default: /usr/local/bin)
#   --etc-dir DIR           the agent's configuration directory       (default: /etc/banhub-agent)
#   --state-dir DIR         the agent's state directory               (default: /var/lib/banhub-agent)
#   --fail2ban-config DIR   fail2ban's configuration directory        (default: /etc/fail2ban)
#   --fail2ban-socket PATH  fail2ban's control socket   (default: /var/run/fail2ban/fail2ban.sock)
#   --relay ADDR            loopback address of the agent's callback relay (default: 127.0.0.1:8721)
#   --systemd-dir DIR       where the unit goes with --binary         (default: /etc/systemd/system)
#   --no-service            do not start the agent; print the command that does
#   --foreground            run the agent in the foreground at the end (for containers and tests;
#                           SIGTERM or Ctrl-C stops it)
#   --force                 enroll again even if the state directory holds an identity
#   --uninstall             stop and remove the agent, restoring fail2ban's configuration
#   --keep-state            with --uninstall: keep the state directory (key, identity, spool)
set -euo pipefail

deb=""
binary=""
bin_dir=/usr/local/bin
etc_dir=/etc/banhub-agent
state_dir=/var/lib/banhub-agent
f2b_conf=/etc/fail2ban
f2b_socket=/var/run/fail2ban/fail2ban.sock
relay=127.0.0.1:8721
systemd_dir=/etc/systemd/system
start=service
force=0
uninstall=0
keep_state=0
token=""

say() { printf 'install-agent: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}
need_value() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --deb) need_value "$@"; deb=$2; shift ;;
    --binary) need_value "$@"; binary=$2; shift ;;
    --bin-dir) need_value "$@"; bin_dir=$2; shift ;;
    --etc-dir) need_value "$@"; etc_dir=$2; shift ;;
    --state-dir) need_value "$@"; state_dir=$2; shift ;;
    --fail2ban-config) need_value "$@"; f2b_conf=$2; shift ;;
    --fail2ban-socket) need_value "$@"; f2b_socket=$2; shift ;;
    --relay) need_value "$@"; relay=$2; shift ;;
    --systemd-dir) need_value "$@"; systemd_dir=$2; shift ;;
    --no-service) start=none ;;
    --foreground) start=foreground ;;
    --force) force=1 ;;
    --uninstall) uninstall=1 ;;
    --keep-state) keep_state=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    -?*) die "unknown option $1 (try --help)" ;;
    *)
      [ -z "$token" ] || die "more than one token given"
      token=$1
      ;;
  esac
  shift
done

config="$etc_dir/agent.toml"
record="$etc_dir/install-agent.record"
have_systemd() { [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; }

# --- uninstall -----------------------------------------------------------------------------------
if [ "$uninstall" = 1 ]; then
  installed_bin="" installed_unit="" installed_deb=0
  if [ -f "$record" ]; then
    # Written by the install below: three plain assignments.
    installed_bin=$(sed -n 's/^bin=//p' "$record")
    installed_unit=$(sed -n 's/^unit=//p' "$record")
    installed_deb=$(sed -n 's/^deb=//p' "$record")
  fi
  agent=${installed_bin:-$(command -v banhub-agent || true)}
  if have_systemd && systemctl list-unit-files banhub-agent.service >/dev/null 2>&1; then
    say "stopping the banhub-agent service"
    systemctl disable --now banhub-agent.service >/dev/null 2>&1 || true
  fi
  if [ -e "$state_dir/action-install.json" ]; then
    [ -n "$agent" ] && [ -x "$agent" ] || die "banhub's action is installed but no banhub-agent binary is left to remove it; reinstall the binary and run this again"
    say "removing banhub's action from $f2b_conf"
    cfg=()
    [ -f "$config" ] && cfg=(--config "$config")
    "$agent" "${cfg[@]}" uninstall-action --config-dir "$f2b_conf" --state-dir "$state_dir" \
      --fail2ban-socket "$f2b_socket" >&2 || die "banhub-agent uninstall-action failed; nothing else was removed"
  fi
  if [ "$installed_deb" = 1 ]; then
    say "purging the banhub-agent package"
    dpkg -P banhub-agent >&2
  fi
  if [ -n "$installed_unit" ] && [ -e "$installed_unit" ]; then
    rm -f "$installed_unit"
    have_systemd && systemctl daemon-reload || true
  fi
  if [ -n "$installed_bin" ] && [ -e "$installed_bin" ]; then
    rm -f "$installed_bin"
  fi
  rm -f "$record" "$config"
  rmdir "$etc_dir" 2>/dev/null || true
  if [ "$keep_state" = 0 ]; then
    rm -rf "$state_dir"
  fi
  say "banhub-agent removed; $f2b_conf is as it was before the install$([ "$keep_state" = 1 ] && echo "; state kept in $state_dir")"
  say "remove the server in the hub too (web UI: Servers → Delete) so its certificate is revoked"
  exit 0
fi

# --- install -------------------------------------------------------------------------------------
[ -n "$token" ] || die "give the enrollment token from the hub (or - to read it from standard input); --help says more"
if [ "$token" = - ]; then
  IFS= read -r token || true
  [ -n "$token" ] || die "no token on standard input"
fi
[ -d "$f2b_conf" ] || die "fail2ban's configuration directory $f2b_conf does not exist; install fail2ban first (apt-get install fail2ban) or pass --fail2ban-config"
command -v fail2ban-client >/dev/null 2>&1 || die "fail2ban-client not found; install fail2ban first (apt-get install fail2ban)"
if [ "$start" = service ] && ! have_systemd; then
  die "this machine does not run systemd; use --foreground to run the agent here, or --no-service and start it yourself"
fi

mkdir -p "$etc_dir"
installed_bin="" installed_unit="" installed_deb=0
if [ -n "$deb" ]; then
  [ -f "$deb" ] || die "$deb does not exist"
  say "installing $(basename "$deb")"
  DEBIAN_FRONTEND=noninteractive dpkg -i "$deb" >&2
  agent=/usr/bin/banhub-agent
  installed_deb=1
else
  if [ -z "$binary" ]; then
    binary=$(command -v banhub-agent || true)
    [ -n "$binary" ] || die "no banhub-agent binary: pass --binary FILE or --deb FILE"
  fi
  [ -x "$binary" ] || die "$binary is not an executable file"
  "$binary" --version >/dev/null || die "$binary does not run here"
  mkdir -p "$bin_dir"
  agent="$bin_dir/banhub-agent"
  if [ "$(readlink -f "$binary")" != "$(readlink -f "$agent" 2>/dev/null || true)" ]; then
    install -m 0755 "$binary" "$agent.new"
    mv -f "$agent.new" "$agent"
    installed_bin=$agent
  fi
  say "installed $("$agent" --version) as $agent"
fi

# The record says what to take away again; written before anything else can fail halfway.
printf 'bin=%s\nunit=%s\ndeb=%s\n' "$installed_bin" "$installed_unit" "$installed_deb" >"$record"

if [ ! -f "$config" ] || [ "$installed_deb" = 1 ]; then
  umask 022
  cat >"$config.new" <<CONF
# banhub agent configuration, written by deploy/install-agent.sh. Every key: README, "Agent".
state_dir = "$state_dir"

[fail2ban]
socket = "$f2b_socket"
config_dir = "$f2b_conf"

[relay]
# Loopback address fail2ban's banhub action posts ban and unban callbacks to.
listen = "$relay"
CONF
  mv -f "$config.new" "$config"
fi
mkdir -p "$state_dir"
chmod 0700 "$state_dir"

if [ -s "$state_dir/identity.json" ] && [ "$force" = 0 ]; then
  say "already enrolled ($state_dir/identity.json); --force enrolls again"
else
  say "enrolling with the hub"
  enroll_args=()
  [ "$force" = 1 ] && enroll_args=(--force)
  printf '%s\n' "$token" | "$agent" --config "$config" enroll - "${enroll_args[@]}" >&2 ||
    die "enrollment failed (see above); the token is single-use and expires: ask the hub for a new one if it was used"
fi

say "installing banhub's action into $f2b_conf"
"$agent" --config "$config" install-action >&2 || die "banhub-agent install-action failed (see above)"

case "$start" in
  service)
    if [ "$installed_deb" = 0 ]; then
      installed_unit="$systemd_dir/banhub-agent.service"
      source_unit="$(cd "$(dirname "$0")" && pwd)/systemd/banhub-agent.service"
      [ -f "$source_unit" ] || die "$source_unit is missing"
      sed -e "s|/usr/bin/banhub-agent|$agent|" -e "s|/etc/banhub-agent/agent.toml|$config|" \
        -e "s|/var/lib/banhub-agent|$state_dir|g" -e "s|^ReadWritePaths=/etc/fail2ban|ReadWritePaths=$f2b_conf|" \
        "$source_unit" >"$installed_unit"
      printf 'bin=%s\nunit=%s\ndeb=%s\n' "$installed_bin" "$installed_unit" "$installed_deb" >"$record"
    fi
    systemctl daemon-reload
    systemctl enable --now banhub-agent.service
    say "banhub-agent runs (systemctl status banhub-agent); it reconnects by itself"
    ;;
  none)
    say "installed; start the agent with: $agent --config $config run"
    ;;
  foreground)
    say "running the agent in the foreground (SIGTERM or Ctrl-C stops it)"
    exec "$agent" --config "$config" run
    ;;
esac
