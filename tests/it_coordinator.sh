#!/usr/bin/env bash
# it_coordinator.sh: `selroll coordinator` as a process against a private redis-server: one-line
# errors for bad flags (exit 2) and an unreachable Redis (exit 1); it binds free ports, logs its
# endpoints, and on SIGTERM exits 0 leaving the run "stopped" in Redis; a second start without
# --resume is refused (exit 1), with --resume it continues the same round.
set -u
cd "$(dirname "$0")/.."
S=bin/selroll
fail=0
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >/dev/null 2>&1 &
rpid=$!
cleanup() { kill "$rpid" 2>/dev/null; wait "$rpid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
for i in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
R=redis://127.0.0.1:$port
free="--work-bind tcp://127.0.0.1:* --bus-pub-bind tcp://127.0.0.1:* --bus-sub-bind tcp://127.0.0.1:*"

$S coordinator --redis "$R" --groups abc 2>"$dir/e"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$dir/e")" -eq 1 ] || { echo "bad flag: rc=$rc"; cat "$dir/e"; fail=1; }
$S coordinator --redis "$R" --bus-external onlyone 2>"$dir/e"; rc=$?
[ $rc -eq 2 ] || { echo "bad --bus-external: rc=$rc"; fail=1; }
$S coordinator --redis redis://127.0.0.1:1 $free 2>"$dir/e"; rc=$?
[ $rc -eq 1 ] && grep -q unreachable "$dir/e" || { echo "unreachable redis: rc=$rc"; cat "$dir/e"; fail=1; }

start() { # start ARGS...: runs the coordinator in the background, waits for its endpoint line
  $S coordinator --redis "$R" --run it $free --out "$dir/out" "$@" 2>"$dir/log" &
  cpid=$!
  for i in $(seq 50); do grep -q "coordinator of run it: work tcp://127.0.0.1:" "$dir/log" && return 0; sleep 0.1; done
  echo "coordinator did not start"; cat "$dir/log"; fail=1; return 1
}
if start; then
  kill -TERM "$cpid"; wait "$cpid"; rc=$?
  [ $rc -eq 0 ] || { echo "SIGTERM: rc=$rc"; fail=1; }
  st=$(redis-cli -p "$port" hget selroll:it:run status)
  [ "$st" = stopped ] || { echo "status after SIGTERM: $st"; fail=1; }
  [ "$(redis-cli -p "$port" scard selroll:it:groups:0)" = 4 ] || { echo "round 0 should have 4 groups"; fail=1; }
fi
$S coordinator --redis "$R" --run it $free 2>"$dir/e"; rc=$?
[ $rc -eq 1 ] && grep -q -- "--resume" "$dir/e" || { echo "existing run without --resume: rc=$rc"; cat "$dir/e"; fail=1; }
if start --resume; then
  grep -q "resuming run it" "$dir/log" || { echo "no resume line"; cat "$dir/log"; fail=1; }
  kill -INT "$cpid"; wait "$cpid"; rc=$?
  [ $rc -eq 0 ] || { echo "SIGINT: rc=$rc"; fail=1; }
fi
[ $fail -eq 0 ] && echo "coordinator CLI: errors, free ports, signals, refusal and resume checked"
exit $fail
