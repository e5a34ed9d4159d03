# A throwaway PostgreSQL 15 server for a test, shared by every test that needs
# one (source it after lib.sh):
#
#   . "$KEEL_SRC/tests/integration/lib_pg.sh"
#   pg_available || { echo "SKIP no PostgreSQL server binaries"; exit 0; }
#   pg_start || exit 1          # sets PG_URL, PG_PORT, PG_DIR; stops on every exit
#   url=$(pg_newdb NAME)         # a fresh empty database: postgresql://keel@127.0.0.1:PORT/NAME
#
# The server runs as an unprivileged system user (tests run as root;
# PostgreSQL refuses root): keelpg, created when missing. It listens on a free
# 127.0.0.1 port, its socket and data live in a temporary folder, and trust
# authentication is limited to that loopback port. pg_stop runs from the EXIT
# trap this sets (a test with its own EXIT trap calls pg_stop from it).
PG_BIN=${KEEL_PG_BIN:-/usr/lib/postgresql/15/bin}
PG_USER=${KEEL_PG_USER:-keelpg}
PG_DIR=
PG_PORT=
PG_URL=

pg_available() { [ -x "$PG_BIN/initdb" ] && [ -x "$PG_BIN/pg_ctl" ] && [ -x "$PG_BIN/psql" ]; }

# Runs a command as the server's user (as it is when not root).
pg_as() {
  if [ "$(id -u)" = 0 ]; then runuser -u "$PG_USER" -- "$@"; else "$@"; fi
}

pg_free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

pg_stop() {
  [ -n "$PG_DIR" ] || return 0
  if [ -f "$PG_DIR/data/postmaster.pid" ]; then
    pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w -t 20 stop > /dev/null 2>&1 ||
      kill -9 "$(head -1 "$PG_DIR/data/postmaster.pid")" 2> /dev/null
  fi
  rm -rf "$PG_DIR"
  PG_DIR=
}

pg_start() {
  if [ "$(id -u)" = 0 ] && ! id -u "$PG_USER" > /dev/null 2>&1; then
    useradd -r -M -d /nonexistent -s /usr/sbin/nologin "$PG_USER" 2> /dev/null || id -u "$PG_USER" > /dev/null 2>&1 || {
      echo "FAIL pg_start: cannot create the system user $PG_USER"
      return 1
    }
  fi
  # not under $T: the server's user must reach it
  PG_DIR=$(mktemp -d /tmp/keel-pg-XXXXXX) || return 1
  trap pg_stop EXIT
  [ "$(id -u)" = 0 ] && chown "$PG_USER" "$PG_DIR"
  chmod 700 "$PG_DIR"
  if ! pg_as "$PG_BIN/initdb" -D "$PG_DIR/data" -U keel --auth=trust --encoding=UTF8 --locale=C -N > "$PG_DIR/initdb.log" 2>&1; then
    echo "FAIL pg_start: initdb: $(tail -c 400 "$PG_DIR/initdb.log")"
    return 1
  fi
  local attempt
  for attempt in 1 2 3 4 5; do
    PG_PORT=$(pg_free_port)
    if pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 30 \
      -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c max_connections=200" start > /dev/null 2>&1; then
      PG_URL="postgresql://keel@127.0.0.1:$PG_PORT/postgres"
      export PG_URL PG_PORT PG_DIR
      return 0
    fi
  done
  echo "FAIL pg_start: the server did not start: $(tail -c 400 "$PG_DIR/server.log")"
  return 1
}

# Crashes the server as a power cut would: SIGKILL to the postmaster and every
# backend at once (no shutdown checkpoint; the next start replays the WAL).
pg_kill9() {
  local pm
  pm=$(head -1 "$PG_DIR/data/postmaster.pid" 2> /dev/null) || return 1
  kill -9 "$pm" $(pgrep -P "$pm") 2> /dev/null
  local _
  for _ in $(seq 100); do kill -0 "$pm" 2> /dev/null || return 0; sleep 0.05; done
  return 1
}

# Starts the server again on the same port after pg_kill9 (crash recovery).
pg_restart() {
  pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
    -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c max_connections=200" start > /dev/null 2>&1
}

# psql against the test server (database postgres unless -d is given).
pg_psql() { PGOPTIONS="-c client_min_messages=warning" "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U keel -d postgres "$@"; }

# A fresh empty database; prints its URL.
pg_newdb() {
  pg_psql -c "DROP DATABASE IF EXISTS \"$1\"" -c "CREATE DATABASE \"$1\"" > /dev/null || return 1
  echo "postgresql://keel@127.0.0.1:$PG_PORT/$1"
}
