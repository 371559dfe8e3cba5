#!/bin/sh
# Times `banhub backup` and `banhub restore` of an SQLite hub holding N ban events (default 1,000,000).
# A hub is started once to create the schema and receive one real ban through the API; the other
# events are copies of it (distinct addresses and sequence numbers) inserted with the sqlite3 CLI.
# Usage: bench/backup/run.sh [EVENTS] [BANHUB_BINARY]   (needs sqlite3, curl, jq)
set -eu
events=${1:-1000000}
bin=${2:-target/release/banhub}
[ -x "$bin" ] || bin=target/debug/banhub
work=$(mktemp -d /var/tmp/banhub-backup-bench.XXXXXX)
trap 'kill "$hub" 2>/dev/null || true; rm -rf "$work"' EXIT
data="$work/data"
mkdir -m 700 "$data"
token=bench-token-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
sha=$(printf %s "$token" | sha256sum | cut -d' ' -f1)
BANHUB_AUTH__BOOTSTRAP_TOKEN_SHA256=$sha "$bin" serve --data-dir "$data" \
    --http-listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 2>"$work/hub.log" &
hub=$!
for _ in $(seq 100); do [ -s "$data/listening.json" ] && break; sleep 0.2; done
api="http://$(jq -r .http "$data/listening.json")"
auth="Authorization: Bearer $token"
id=$(curl -sf -H "$auth" -H 'Content-Type: application/json' -d '{"name":"bench-1"}' "$api/api/servers" | jq -r .server.id)
secret=$(curl -sf -H "$auth" -H 'Content-Type: application/json' -d '{}' "$api/api/servers/$id/callback-secret" | jq -r .secret)
curl -sf -H "X-Callback-Secret: $secret" -H 'Content-Type: application/json' \
    -d '{"ip":"192.0.2.1","jail":"sshd","hostname":"bench-1","failures":3,"logs":["Failed password for root from 192.0.2.1 port 22 ssh2"]}' \
    "$api/api/ban" >/dev/null
for _ in $(seq 100); do
    [ "$(curl -sf -H "$auth" "$api/api/events/bans?serverId=$id&limit=1" | jq '.events | length')" = 1 ] && break
    sleep 0.2
done
kill "$hub"; wait "$hub" || true
sqlite3 "$data/banhub.db" "
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $events - 1)
INSERT INTO events (server_id, agent_id, epoch, seq, kind, source, ip, ip_key, jail, hostname, failures,
                    logs, ban_time, ban_duration, ban_count, lost, detail, occurred_at, stored_at)
SELECT t.server_id, t.agent_id, t.epoch, COALESCE(t.seq, 0) + i, t.kind, t.source,
       '10.' || (i / 65536 % 256) || '.' || (i / 256 % 256) || '.' || (i % 256), t.ip_key, t.jail,
       t.hostname, t.failures, t.logs, t.ban_time, t.ban_duration, t.ban_count, t.lost, t.detail,
       t.occurred_at + i, t.stored_at + i
FROM n, (SELECT * FROM events LIMIT 1) AS t;"
echo "== banhub backup/restore: $(sqlite3 "$data/banhub.db" 'SELECT COUNT(*) FROM events') events, $bin, load average $(cut -d' ' -f1-3 /proc/loadavg) =="
echo "database: $(du -h "$data/banhub.db" | cut -f1)"
start=$(date +%s.%N)
"$bin" backup "$work/backup" --data-dir "$data"
end=$(date +%s.%N)
echo "backup: $(echo "$end - $start" | bc) s wall; files: $(du -sh "$work/backup" | cut -f1)"
rm -rf "$data"
start=$(date +%s.%N)
"$bin" restore "$work/backup" --data-dir "$data"
end=$(date +%s.%N)
echo "restore: $(echo "$end - $start" | bc) s wall"
# The same two steps with optimized C tools, for scale against a debug build: the snapshot and one
# checksum pass over it.
start=$(date +%s.%N)
sqlite3 "$data/banhub.db" "VACUUM INTO '$work/cli-copy.db'"
end=$(date +%s.%N)
echo "sqlite3 CLI VACUUM INTO: $(echo "$end - $start" | bc) s wall"
start=$(date +%s.%N)
sha256sum "$work/cli-copy.db" >/dev/null
end=$(date +%s.%N)
echo "sha256sum of the copy: $(echo "$end - $start" | bc) s wall"
