#!/usr/bin/env bash
# it_env_worker.sh: the real `selroll env-worker` process on a free port, registered in a private
# redis-server (mktemp -d), driven by tests/py/env_client.py: an expert episode is won with reward
# 1, random episodes end, bad requests get their ERROR codes; SIGTERM exits 0 and removes the
# registry entry; bad flags exit 2 with one line; a worker started while its Redis is down serves
# at once and registers, with heartbeats, once a redis-server started after it answers. Then the
# Python toy env worker (docs/examples/env_worker.py) is driven by the same client.
set -u
cd "$(dirname "$0")/.."
source tests/itlib.sh
CLIENT=tests/py/env_client.py
it_redis_start

# The env worker.
port=$(free_port)
$S env-worker --bind "tcp://127.0.0.1:$port" --capacity 16 --redis "redis://127.0.0.1:$rport" \
  --run it --id w-it --heartbeat-ms 200 >"$tmp/envw.log" 2>&1 &
wpid=$!
pids+=($wpid)
wait_port "$port" || { echo "env-worker did not listen"; cat "$tmp/envw.log"; exit 1; }
EP="tcp://127.0.0.1:$port"

for _ in $(seq 50); do [ "$($R exists selroll:it:envw:w-it)" = 1 ] && break; sleep 0.05; done
[ "$($R hget selroll:it:envw:w-it endpoint)" = "$EP" ] || { echo "registry endpoint wrong"; fail=1; }
[ "$($R hget selroll:it:envw:w-it capacity)" = 16 ] || { echo "registry capacity wrong"; fail=1; }
[ "$($R hget selroll:it:envw:w-it pid)" = "$wpid" ] || { echo "registry pid wrong"; fail=1; }
ttl=$($R pttl selroll:it:envw:w-it)
{ [ "$ttl" -gt 0 ] && [ "$ttl" -le 600 ]; } || { echo "registry TTL $ttl not in (0, 600] ms"; fail=1; }

# The expert's actions win each task with reward 1.
for id in household/train/3 household/valid_seen/8 household/valid_unseen/21; do
  timeout 10 $S env expert "$id" | grep '^> ' | sed 's/^> //' >"$tmp/actions"
  timeout 30 "$PY" $CLIENT "$EP" play "$id" --actions "$tmp/actions" --expect-won \
    || { echo "expert actions over the wire did not win $id"; fail=1; }
done
# Seeded random admissible actions until the episode ends (max 15 steps).
timeout 30 "$PY" $CLIENT "$EP" play household/train/9 --seed 4 --max-steps 15 \
  || { echo "random episode failed"; fail=1; }
timeout 30 "$PY" $CLIENT "$EP" errors --task household/train/1 || { echo "error checks failed"; fail=1; }

# SIGTERM: exit 0, registry entry gone, counters logged.
kill -TERM "$wpid"
wait "$wpid"; rc=$?
[ $rc -eq 0 ] || { echo "env-worker exit $rc after SIGTERM"; fail=1; }
[ "$($R exists selroll:it:envw:w-it)" = 0 ] || { echo "registry entry left after shutdown"; fail=1; }
grep -q 'steps' "$tmp/envw.log" || { echo "no counters logged at shutdown"; fail=1; }

# Bad flags and start-up failures: one line each.
out=$($S env-worker --bind "tcp://127.0.0.1:$port" --capacity zero 2>&1); rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ]; } || { echo "bad --capacity: rc $rc, '$out'"; fail=1; }
out=$($S env-worker --capacity 3 2>&1); rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ]; } || { echo "missing --bind: rc $rc, '$out'"; fail=1; }
out=$($S env-worker --bind "tcp://127.0.0.1:$port" --capacity 3 --frobnicate 2>&1); rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ]; } || { echo "unknown flag: rc $rc, '$out'"; fail=1; }
out=$($S env-worker --bind "tcp://127.0.0.1:$port" --capacity 3 --redis redis:/x 2>&1); rc=$?
{ [ $rc -eq 1 ] && [ "$(wc -l <<<"$out")" -eq 1 ]; } || { echo "bad redis url: rc $rc, '$out'"; fail=1; }

# Started while Redis is unreachable: it serves at once, and registers (with heartbeats) once a
# redis-server answers on that port, started after it.
lport=$(free_port)
lrport=$(free_port)
$S env-worker --bind "tcp://127.0.0.1:$lport" --capacity 4 --redis "redis://127.0.0.1:$lrport" \
  --run it --id w-late --heartbeat-ms 200 >"$tmp/late.log" 2>&1 &
lpid=$!
pids+=($lpid)
wait_port "$lport" || { echo "env-worker without Redis did not listen"; cat "$tmp/late.log"; exit 1; }
timeout 10 $S env expert household/train/5 | grep '^> ' | sed 's/^> //' >"$tmp/late_actions"
timeout 30 "$PY" $CLIENT "tcp://127.0.0.1:$lport" play household/train/5 --actions "$tmp/late_actions" \
  --expect-won || { echo "env-worker without Redis did not serve"; fail=1; }
kill -0 "$lpid" 2>/dev/null || { echo "env-worker without Redis exited"; cat "$tmp/late.log"; fail=1; }
redis-server --port "$lrport" --bind 127.0.0.1 --dir "$tmp" --dbfilename late.rdb --save '' \
  --appendonly no --daemonize no >"$tmp/late_redis.log" 2>&1 &
pids+=($!)
wait_port "$lrport" || { echo "late redis-server did not start"; exit 1; }
LR="redis-cli -p $lrport"
for _ in $(seq 100); do [ "$($LR exists selroll:it:envw:w-late)" = 1 ] && break; sleep 0.05; done
[ "$($LR hget selroll:it:envw:w-late endpoint)" = "tcp://127.0.0.1:$lport" ] \
  || { echo "late registry entry missing or wrong: $($LR hgetall selroll:it:envw:w-late)"; fail=1; }
sleep 1.2 # six heartbeats: the entry (TTL 600 ms) lives on only if they are renewed
ttl=$($LR pttl selroll:it:envw:w-late)
{ [ "$ttl" -gt 0 ] && [ "$ttl" -le 600 ]; } || { echo "late registry TTL $ttl not renewed"; fail=1; }
timeout 30 "$PY" $CLIENT "tcp://127.0.0.1:$lport" play household/train/5 --actions "$tmp/late_actions" \
  --expect-won || { echo "env-worker did not serve after registering"; fail=1; }
grep -q 'registered in Redis' "$tmp/late.log" || { echo "no 'registered' line"; cat "$tmp/late.log"; fail=1; }
kill -TERM "$lpid"
wait "$lpid"; rc=$?
[ $rc -eq 0 ] || { echo "late env-worker exit $rc after SIGTERM"; fail=1; }
[ "$($LR exists selroll:it:envw:w-late)" = 0 ] || { echo "late registry entry left after shutdown"; fail=1; }
out=$($S env-worker --bind "tcp://127.0.0.1:$rport" --capacity 3 2>&1); rc=$?
{ [ $rc -eq 1 ] && grep -q 'bind' <<<"$out"; } || { echo "bind failure: rc $rc, '$out'"; fail=1; }
$S env-worker --help | grep -q -- '--step-latency-ms' || { echo "--help lacks --step-latency-ms"; fail=1; }

# The Python toy env worker, driven by the same client.
tport=$(free_port)
"$PY" docs/examples/env_worker.py --bind "tcp://127.0.0.1:$tport" --capacity 4 2>"$tmp/toy.log" &
tpid=$!
pids+=($tpid)
wait_port "$tport" || { echo "toy env worker did not listen"; cat "$tmp/toy.log"; exit 1; }
TEP="tcp://127.0.0.1:$tport"
printf 'press up\nlook\npress up\npress up\n' >"$tmp/toy_actions"
timeout 30 "$PY" $CLIENT "$TEP" play counter/3 --actions "$tmp/toy_actions" --expect-won \
  || { echo "toy env: counter/3 not won"; fail=1; }
timeout 30 "$PY" $CLIENT "$TEP" play counter/40 --seed 2 --max-steps 10 \
  || { echo "toy env: random episode failed"; fail=1; }
timeout 30 "$PY" $CLIENT "$TEP" errors --task counter/2 || { echo "toy env: error checks failed"; fail=1; }
kill -TERM "$tpid"; wait "$tpid"; rc=$?
[ $rc -eq 0 ] || { echo "toy env worker exit $rc after SIGTERM"; fail=1; }

[ $fail -eq 0 ] && echo "env-worker: registry, expert wins over ZeroMQ, random play, error codes, SIGTERM, bad flags; Python toy env worker served by the same client"
exit $fail
