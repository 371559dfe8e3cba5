#!/usr/bin/env bash
# Checks that the OpenAPI document is exact: schemathesis (pinned in .ci/deps.d/60-schemathesis.sh)
# sends generated requests, valid and invalid, to every operation of a real hub and fails on a 500, a
# status code or content type the document does not list, a response that breaks its schema, or a
# request that fits the schema and is refused (schemathesis.toml: the checks and their exceptions).
#
# The hub is `target/debug/banhub` (build it first) on SQLite in a temporary directory, with a
# bootstrap admin token and one registered server ("st-host") that has no agent: every command for
# a host then answers 503 (`agent_offline`, `agent_not_enrolled`), which the document lists. Fleet
# behaviour with agents is the end-to-end tests' business; this run is about the document.
#
# Usage: tests/schemathesis/run.sh [extra `st run` options]. EXAMPLES (default 25) is the number of
# examples per operation; REPORT_DIR keeps the reports when set.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

examples=${EXAMPLES:-25}
binary=target/debug/banhub
if [ ! -x "$binary" ]; then
  echo "schemathesis: $binary is missing; run cargo build -p banhub first" >&2
  exit 1
fi
if ! command -v st >/dev/null 2>&1; then
  echo "schemathesis: the st command is missing; run .ci/install-deps" >&2
  exit 1
fi

work=$(mktemp -d -t banhub-schemathesis-XXXXXX)
hub_pid=
cleanup() {
  if [ -n "$hub_pid" ]; then
    kill "$hub_pid" 2>/dev/null || true
    wait "$hub_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

token="schemathesis-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
token_sha=$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)

mkdir "$work/data"
env -u BANHUB_CONFIG BANHUB_AUTH__BOOTSTRAP_TOKEN_SHA256="$token_sha" \
  "$binary" serve --data-dir "$work/data" --http-listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 \
  >"$work/hub.log" 2>&1 &
hub_pid=$!

# The hub writes listening.json once both listeners are bound.
for _ in $(seq 1 300); do
  [ -s "$work/data/listening.json" ] && break
  if ! kill -0 "$hub_pid" 2>/dev/null; then
    echo "schemathesis: the hub exited; its log:" >&2
    cat "$work/hub.log" >&2
    exit 1
  fi
  sleep 0.1
done
http=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["http"])' "$work/data/listening.json")
base="http://$http"

# The one server the requests name (with Python rather than curl, which a machine may lack).
python3 - "$base" "$token" <<'PY'
import json, sys, urllib.request
base, token = sys.argv[1], sys.argv[2]
request = urllib.request.Request(
    f"{base}/api/servers",
    data=json.dumps({"name": "st-host", "description": "schemathesis target"}).encode(),
    headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    method="POST",
)
urllib.request.urlopen(request, timeout=30).read()
PY

status=0
# Hypothesis, under schemathesis, keeps its caches here rather than in the working directory.
export HYPOTHESIS_STORAGE_DIRECTORY="$work/hypothesis"
st --config-file tests/schemathesis/schemathesis.toml run "$base/api/openapi.json" \
  --max-examples "$examples" \
  --seed "${SEED:-1}" \
  --workers 1 \
  --request-timeout 30 \
  -H "Authorization: Bearer $token" \
  -H "X-BanDaemon-Server: st-host" \
  --report junit --report-dir "${REPORT_DIR:-$work/report}" \
  "$@" || status=$?

if [ "$status" -ne 0 ]; then
  echo "schemathesis: failed (exit $status); the end of the hub's log:" >&2
  tail -n 40 "$work/hub.log" >&2
fi
exit "$status"
