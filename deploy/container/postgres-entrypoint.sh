#!/bin/sh
# Entry point of Containerfile.postgres: on first start, makes the cluster in $PGDATA with the
# public postgres image's variables (POSTGRES_USER, default postgres; POSTGRES_PASSWORD, required;
# POSTGRES_DB, default the user's name), then runs the server in the foreground, listening on every
# interface with password authentication.
set -eu

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
  user=${POSTGRES_USER:-postgres}
  db=${POSTGRES_DB:-$user}
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb --pgdata="$PGDATA" --username="$user" --pwfile="$pwfile" --auth-local=trust \
    --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  rm -f "$pwfile"
  printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    printf 'CREATE DATABASE "%s" OWNER "%s";\n' "$db" "$user" |
      postgres --single -D "$PGDATA" -c listen_addresses= postgres >/dev/null
  fi
  echo "postgres-entrypoint: made the cluster in $PGDATA (database $db, user $user)"
fi

exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
