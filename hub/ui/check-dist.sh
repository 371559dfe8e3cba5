#!/usr/bin/env bash
# CI's check of the web UI (called by .ci/test as the `ui` step): the generated API types match the
# committed OpenAPI copy, every locale has every message and no component hard-codes text
# (scripts/check-i18n.mjs), the code type-checks, the unit tests pass, and a fresh build is byte for
# byte the committed dist/ (which the hub embeds). Run `hub/ui/update-api.sh` after an API change and
# `npm run build` after a UI change, then commit both.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

fail() {
  printf 'check-dist: %s\n' "$*" >&2
  exit 1
}

[ -x node_modules/.bin/vite ] ||
  fail "hub/ui/node_modules is missing; run .ci/deps.d/40-ui.sh (npm ci in hub/ui)"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

echo "check-dist: API types against src/lib/api/openapi.json"
node_modules/.bin/openapi-typescript src/lib/api/openapi.json -o "$scratch/schema.d.ts" >/dev/null 2>&1 ||
  fail "openapi-typescript could not read src/lib/api/openapi.json"
if ! diff -u src/lib/api/schema.d.ts "$scratch/schema.d.ts" >"$scratch/schema.diff"; then
  head -n 40 "$scratch/schema.diff" >&2
  fail "src/lib/api/schema.d.ts is not generated from src/lib/api/openapi.json; run hub/ui/update-api.sh and commit"
fi

echo "check-dist: translations"
node scripts/check-i18n.mjs

echo "check-dist: svelte-check"
node_modules/.bin/svelte-check --tsconfig ./tsconfig.json --fail-on-warnings --output human

echo "check-dist: unit tests"
node_modules/.bin/vitest run

echo "check-dist: rebuilding into a scratch directory"
node_modules/.bin/vite build --outDir "$scratch/dist" --emptyOutDir --logLevel warn
if ! diff -r dist "$scratch/dist" >"$scratch/dist.diff"; then
  head -n 40 "$scratch/dist.diff" >&2
  fail "hub/ui/dist differs from a fresh build; run 'npm run build' in hub/ui and commit dist/"
fi
echo "check-dist: dist/ is up to date"
