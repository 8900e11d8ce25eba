# itlib.sh: what the integration scripts share, sourced after `cd` to the repository root.
# Gives S (the binary), PY (a python3 with zmq and msgpack), tmp (a private folder removed at exit; kept, and named, with IT_KEEP_TMP=1),
# pids (processes killed and reaped at exit; append with `pids+=($!)`), fail (set by bad),
# ok/bad (one result line each), free_port, wait_port and it_redis_start.
S=bin/selroll
PY=${SELROLL_PYTHON:-/usr/bin/python3}
fail=0
tmp=$(mktemp -d)
pids=()
it_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "${IT_KEEP_TMP:-}" ] || rm -rf "$tmp"; [ -z "${IT_KEEP_TMP:-}" ] || echo "kept $tmp"
}
trap it_cleanup EXIT

ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# free_port: prints a TCP port free on 127.0.0.1 right now.
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# wait_port PORT: until something listens on 127.0.0.1:PORT (5 s at most); 1 when nothing does.
wait_port() {
  for _ in $(seq 100); do
    "$PY" -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1',$1)))" && return 0
    sleep 0.05
  done
  return 1
}

# it_redis_start: a private redis-server on a free loopback port with its files in $tmp; sets
# rport, R (a redis-cli command) and RURL; exits the script when it does not come up.
it_redis_start() {
  rport=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --dir "$tmp" --save '' --appendonly no \
    --daemonize no >"$tmp/redis.log" 2>&1 &
  pids+=($!)
  wait_port "$rport" || { echo "redis-server did not start"; exit 1; }
  R="redis-cli -p $rport"
  RURL="redis://127.0.0.1:$rport"
}
