# Helper for the tests that need a Redis server (sourced after lib.sh, not a
# test itself): redis_start starts `redis-server` on a free 127.0.0.1 port with
# no persistence and sets REDIS_PORT and REDIS_URL; redis_stop stops it (and
# is trapped on every exit of the test); redis_restart stops and starts it
# again on the same port (the keys are gone: no persistence).
# at_exit CMD adds a command run on exit before the server stops (keel serve
# replicas, nginx). free_port prints a port nothing listens on.
free_port() { $PYTHON -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

REDIS_PID=
EXIT_HOOKS=
at_exit() { EXIT_HOOKS="$EXIT_HOOKS $1;"; }
redis_exit() { eval "$EXIT_HOOKS"; redis_stop; }
redis_launch() {
  redis-server --port "$REDIS_PORT" --save "" --appendonly no --bind 127.0.0.1 --dir "$T" \
    --logfile "$T/redis-$REDIS_PORT.log" --daemonize no > /dev/null 2>&1 &
  REDIS_PID=$!
  local i
  for i in $(seq 1 100); do
    redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && return 0
    sleep 0.05
  done
  return 1
}
redis_start() {
  command -v redis-server > /dev/null || { fail redis_start "redis-server not installed (mk/packages.txt: redis-server)"; return 1; }
  REDIS_PORT=$(free_port)
  REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
  trap redis_exit EXIT
  redis_launch || { fail redis_start "redis-server did not answer on port $REDIS_PORT: $(tail -3 "$T/redis-$REDIS_PORT.log" 2>/dev/null)"; return 1; }
}
redis_stop() {
  [ -n "$REDIS_PID" ] || return 0
  kill "$REDIS_PID" 2>/dev/null
  wait "$REDIS_PID" 2>/dev/null
  REDIS_PID=
}
redis_restart() { redis_stop; redis_launch; }
