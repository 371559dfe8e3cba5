#!/usr/bin/env bash
# Refreshes the UI's copy of the hub's OpenAPI document and the TypeScript types generated from it.
# Run after changing the API; a type error in the UI then shows what it must follow. The Rust test
# `ui::openapi_copy_matches_the_hub` fails until this has been run and committed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
cargo run --quiet -p banhub -- openapi >src/lib/api/openapi.json.tmp
mv src/lib/api/openapi.json.tmp src/lib/api/openapi.json
node_modules/.bin/openapi-typescript src/lib/api/openapi.json -o src/lib/api/schema.d.ts
echo "updated src/lib/api/openapi.json and src/lib/api/schema.d.ts; now run: npm run check && npm run build"
