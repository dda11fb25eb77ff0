#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on loopback, for tests.
#   scripts/pg-throwaway.sh start DIR PORT   -> prints the DATABASE_URL
#   scripts/pg-throwaway.sh stop DIR
# initdb refuses to run as root, so as root the cluster runs as the `postgres` user.
set -euo pipefail
cmd=${1:?start|stop}; dir=${2:?directory}

bin=""
if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
  bin=$(dirname "$(command -v pg_ctl)")
else
  for candidate in /usr/lib/postgresql/*/bin; do
    [ -x "$candidate/pg_ctl" ] && bin=$candidate
  done
fi
if [ -z "$bin" ]; then
  echo "pg-throwaway: no PostgreSQL server binaries found (apt-get install postgresql)" >&2
  exit 1
fi

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
  start)
    port=${3:?port}
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
      id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
      chown postgres "$dir"
    fi
    as_owner "$bin/initdb" -D "$dir/data" -U app --auth=trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 || {
      cat "$dir/initdb.log" >&2; exit 1; }
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=200" start >/dev/null || {
      cat "$dir/log" >&2; exit 1; }
    echo "postgres://app@127.0.0.1:$port/postgres"
    ;;
  stop)
    [ -d "$dir/data" ] && as_owner "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
  *) echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2 ;;
esac
