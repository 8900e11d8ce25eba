#!/usr/bin/env bash
# it_coordinator.sh: `selroll coordinator` as a process against a private redis-server: one-line
# errors for bad flags (exit 2), a malformed Redis URL and a wrong Redis password (exit 1); it
# binds free ports, logs its endpoints, and on SIGTERM exits 0 leaving the run "stopped" in Redis;
# a second start without --resume is refused (exit 1), with --resume it continues the same round.
# Then a coordinator started before its Redis (as Kubernetes or systemd may order them): it binds
# and answers HELLO while the Redis port is closed, a real env worker and a real actor connect, a
# redis-server is started on that port afterwards, and the run completes with G results in every
# group.
set -u
cd "$(dirname "$0")/.."
S=bin/selroll
fail=0
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >/dev/null 2>&1 &
rpid=$!
pids=()
cleanup() {
  kill "$rpid" "${pids[@]}" 2>/dev/null; wait "$rpid" "${pids[@]}" 2>/dev/null; [ -n "${IT_KEEP_TMP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
for i in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
R=redis://127.0.0.1:$port
free="--work-bind tcp://127.0.0.1:* --bus-pub-bind tcp://127.0.0.1:* --bus-sub-bind tcp://127.0.0.1:*"

$S coordinator --redis "$R" --groups abc 2>"$dir/e"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$dir/e")" -eq 1 ] || { echo "bad flag: rc=$rc"; cat "$dir/e"; fail=1; }
$S coordinator --redis "$R" --bus-external onlyone 2>"$dir/e"; rc=$?
[ $rc -eq 2 ] || { echo "bad --bus-external: rc=$rc"; fail=1; }
$S coordinator --redis redis:/127.0.0.1 $free 2>"$dir/e"; rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$dir/e")" -eq 1 ] || { echo "malformed redis URL: rc=$rc"; cat "$dir/e"; fail=1; }
$S coordinator --redis "redis://:wrong@127.0.0.1:$port" $free 2>"$dir/e"; rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$dir/e")" -eq 1 ] && grep -q refused "$dir/e" ||
  { echo "wrong redis password: rc=$rc"; cat "$dir/e"; fail=1; }

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

# --- started before its Redis ---------------------------------------------------------------------
fport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dport=$(fport); wport=$(fport); pport=$(fport); eport=$(fport)
D=redis://127.0.0.1:$dport
$S policy-server --listen "127.0.0.1:$pport" --time-scale 100 >"$dir/policy.log" 2>&1 &
pids+=($!)
$S coordinator --redis "$D" --run down --work-bind "tcp://127.0.0.1:$wport" --bus-pub-bind "tcp://127.0.0.1:*" \
  --bus-sub-bind "tcp://127.0.0.1:*" --http off --out "$dir/out-down" --iters 1 --groups 2 --group-size 4 \
  --lease-ms 2000 --heartbeat-ms 300 2>"$dir/down.log" &
dpid=$!
pids+=($dpid)
for i in $(seq 50); do grep -q "the run starts once Redis answers" "$dir/down.log" && break; sleep 0.1; done
grep -q "the run starts once Redis answers" "$dir/down.log" ||
  { echo "down: the coordinator did not say it waits for Redis"; cat "$dir/down.log"; fail=1; }
# HELLO answered (WELCOME) with the Redis port still closed
/usr/bin/python3 - "$wport" <<'EOF' || { echo "down: no WELCOME while Redis was down"; fail=1; }
import os, sys, time, msgpack, zmq
s = zmq.Context().socket(zmq.DEALER); s.setsockopt(zmq.LINGER, 0)
s.setsockopt(zmq.IDENTITY, b"probe-down"); s.connect("tcp://127.0.0.1:%s" % sys.argv[1])
s.send(msgpack.packb({"t": "HELLO", "v": 1, "actor_id": "probe-down", "role": "actor", "slots": 0,
                      "host": "it", "pid": os.getpid()}, use_bin_type=True))
t0 = time.monotonic()
if not s.poll(2000):
    sys.exit(1)
m = msgpack.unpackb(s.recv(), raw=False)
print("     down: %s %.1f ms after HELLO, Redis down" % (m["t"], 1000 * (time.monotonic() - t0)))
s.send(msgpack.packb({"t": "BYE", "v": 1, "actor_id": "probe-down"}, use_bin_type=True))
sys.exit(0 if m["t"] == "WELCOME" else 1)
EOF
$S env-worker --bind "tcp://127.0.0.1:$eport" --redis "$D" --run down --id envw-down --capacity 16 \
  --heartbeat-ms 300 >"$dir/envw-down.log" 2>&1 &
pids+=($!)
$S actor --coordinator "tcp://127.0.0.1:$wport" --id actor-down --slots 8 --policy "http://127.0.0.1:$pport" \
  >"$dir/actor-down.log" 2>&1 &
pids+=($!)
sleep 1.5
kill -0 "$dpid" 2>/dev/null || { echo "down: the coordinator exited with Redis down"; cat "$dir/down.log"; fail=1; }
redis-server --port "$dport" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --dbfilename down.rdb \
  >/dev/null 2>&1 &
pids+=($!)
for i in $(seq 600); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.1; done
wait "$dpid"; rc=$?
[ $rc -eq 0 ] || { echo "down: coordinator exit $rc"; tail -20 "$dir/down.log"; fail=1; }
grep -q "run down: Redis answers" "$dir/down.log" || { echo "down: no 'Redis answers' line"; fail=1; }
[ "$(redis-cli -p "$dport" scard selroll:down:groups:0)" = 2 ] || { echo "down: round 0 should have 2 groups"; fail=1; }
for gid in $(redis-cli -p "$dport" smembers selroll:down:groups:0); do
  st=$(redis-cli -p "$dport" hget "selroll:down:group:$gid" status)
  fin=$(redis-cli -p "$dport" hget "selroll:down:group:$gid" finished)
  [ "$st" = done ] && [ "$fin" = 4 ] || { echo "down: group $gid: $st, finished $fin"; fail=1; }
done
nres=$(redis-cli -p "$dport" llen selroll:down:results:0)
[ "$nres" = 8 ] || { echo "down: $nres results stored, not 8"; fail=1; }
[ "$(redis-cli -p "$dport" hget selroll:down:run status)" = finished ] || { echo "down: run not finished"; fail=1; }
[ $fail -eq 0 ] && echo "coordinator started before its Redis: HELLO answered, the run completed once Redis answered"
# A wrong password only shows once Redis answers: then the coordinator stops (exit 1, the refusal said).
pwport=$(fport)
$S coordinator --redis "redis://:wrong@127.0.0.1:$pwport" --run pw $free --http off 2>"$dir/pw.log" &
pwpid=$!
pids+=($pwpid)
sleep 0.5
kill -0 "$pwpid" 2>/dev/null || { echo "refused later: the coordinator exited with Redis down"; cat "$dir/pw.log"; fail=1; }
redis-server --port "$pwport" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --dbfilename pw.rdb \
  --requirepass right >/dev/null 2>&1 &
pids+=($!)
for i in $(seq 100); do kill -0 "$pwpid" 2>/dev/null || break; sleep 0.05; done
wait "$pwpid"; rc=$?
[ $rc -eq 1 ] && grep -q "redis refused the connection" "$dir/pw.log" ||
  { echo "refused later: rc=$rc"; cat "$dir/pw.log"; fail=1; }

[ $fail -eq 0 ] && echo "coordinator CLI: errors, free ports, signals, refusal and resume checked"
exit $fail
