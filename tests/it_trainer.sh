#!/usr/bin/env bash
# it_trainer.sh: the real `selroll trainer` process with a private redis-server (mktemp -d) and a
# real env worker. tests/py/trainer_push.py records household episodes through the env worker with
# the real prompt text, pushes BATCHes and checks the WEIGHTS_READY acks: garbage gets none,
# wrong-shape and message-less batches are refused (ok false with the reason), iterations 0 and 1
# give versions 1 and 2, iteration 0 sent twice is acked again with version 1 (not trained), and
# iteration 0 after iteration 1 is refused. Redis then holds the weights and the run record. A restarted
# trainer resumes at version 2. A trainer started while its Redis is down binds and waits; once a
# redis-server is started on that port it resumes at version 2 and acks the BATCH sent meanwhile.
# Bad flags exit 2 with one line, a malformed Redis URL or a wrong password 1; SIGTERM exits 0.
# Then the example external trainer (docs/examples/trainer.py) acks a saved batch.
set -u
cd "$(dirname "$0")/.."
source tests/itlib.sh
PUSHER=tests/py/trainer_push.py
it_redis_start
rpid=${pids[-1]}

eport=$(free_port)
$S env-worker --bind "tcp://127.0.0.1:$eport" --capacity 16 >"$tmp/envw.log" 2>&1 &
pids+=($!)
wait_port "$eport" || { echo "env-worker did not listen"; cat "$tmp/envw.log"; exit 1; }

tport=$(free_port)
aport=$(free_port)
start_trainer() {
  $S trainer --pull "tcp://127.0.0.1:$tport" --push "tcp://127.0.0.1:$aport" --redis "$RURL" \
    --run it --seed 0 >"$tmp/trainer.log" 2>&1 &
  tpid=$!
  pids+=($tpid)
  wait_port "$tport" || { echo "trainer did not listen"; cat "$tmp/trainer.log"; exit 1; }
}
start_trainer

timeout 120 "$PY" $PUSHER --env "tcp://127.0.0.1:$eport" --trainer "tcp://127.0.0.1:$tport" \
  --acks "tcp://127.0.0.1:$aport" --run it --selroll $S scenario --save "$tmp/batch.msgpack" \
  || { echo "trainer scenario failed"; cat "$tmp/trainer.log"; fail=1; }

for v in 1 2; do
  n=$($R strlen "selroll:it:weights:$v")
  [ "$n" -gt 1000000 ] || { echo "weights of version $v missing in Redis ($n bytes)"; fail=1; }
done
[ "$($R exists selroll:it:weights:3)" = 0 ] || { echo "a refused batch made version 3"; fail=1; }
[ "$($R hget selroll:it:run trained_version)" = 2 ] || { echo "run record trained_version wrong"; fail=1; }
[ "$($R hget selroll:it:run trained_iteration)" = 1 ] || { echo "run record trained_iteration wrong"; fail=1; }
grep -q 'does not decode' "$tmp/trainer.log" || { echo "garbage not logged"; fail=1; }
grep -q 'already trained' "$tmp/trainer.log" || { echo "repeated iteration not logged"; fail=1; }

# SIGTERM: exit 0 with a summary line.
kill -TERM "$tpid"; wait "$tpid"; rc=$?
[ $rc -eq 0 ] || { echo "trainer exit $rc after SIGTERM"; fail=1; }
grep -q 'stopping at version 2 (6 batches: 2 trained, 1 acked again, 3 refused; 1 discarded' "$tmp/trainer.log" \
  || { echo "no shutdown summary"; tail -3 "$tmp/trainer.log"; fail=1; }

# A restarted trainer resumes at version 2.
start_trainer
for _ in $(seq 50); do grep -q 'version 2 pull' "$tmp/trainer.log" && break; sleep 0.05; done
grep -q 'run it version 2 pull' "$tmp/trainer.log" || { echo "restart did not resume"; cat "$tmp/trainer.log"; fail=1; }
kill -TERM "$tpid"; wait "$tpid"

# A trainer started while its Redis is down binds and waits; once a redis-server is started on
# that port (on the same data) it resumes at version 2 and takes the BATCH that waited meanwhile.
$R save >/dev/null
kill -TERM "$rpid"; wait "$rpid" 2>/dev/null
for _ in $(seq 100); do $R ping >/dev/null 2>&1 || break; sleep 0.05; done
start_trainer
sleep 1
kill -0 "$tpid" 2>/dev/null || { echo "down: the trainer exited with Redis down"; cat "$tmp/trainer.log"; fail=1; }
grep -q "Redis does not answer" "$tmp/trainer.log" || { echo "down: no 'does not answer' line"; cat "$tmp/trainer.log"; fail=1; }
grep -q "pull tcp" "$tmp/trainer.log" && { echo "down: the trainer said it runs before reading the run record"; fail=1; }
timeout 60 "$PY" $PUSHER --trainer "tcp://127.0.0.1:$tport" --acks "tcp://127.0.0.1:$aport" \
  send "$tmp/batch.msgpack" --expect-version 2 >"$tmp/send-down.log" 2>&1 &
spid=$!
pids+=($spid)
sleep 0.5
redis-server --port "$rport" --bind 127.0.0.1 --dir "$tmp" --save '' --appendonly no \
  --daemonize no >"$tmp/redis-2.log" 2>&1 &
rpid=$!
pids+=($rpid)
wait "$spid" || { echo "down: the BATCH sent while Redis was down got no ack"; cat "$tmp/send-down.log"; fail=1; }
grep -q 'run it version 2 pull' "$tmp/trainer.log" || { echo "down: no resume at version 2"; cat "$tmp/trainer.log"; fail=1; }
[ "$(grep -c "Redis does not answer" "$tmp/trainer.log")" = 1 ] && [ "$(grep -c "Redis answers" "$tmp/trainer.log")" = 1 ] ||
  { echo "down: not one line each for Redis down and back"; cat "$tmp/trainer.log"; fail=1; }
kill -TERM "$tpid"; wait "$tpid"; rc=$?
[ $rc -eq 0 ] || { echo "down: trainer exit $rc after SIGTERM"; fail=1; }
# A wrong password only shows once Redis answers: then the trainer stops (exit 1, the refusal said).
wport=$(free_port)
$S trainer --pull "tcp://127.0.0.1:$tport" --push "tcp://127.0.0.1:$aport" --redis "redis://:wrong@127.0.0.1:$wport" \
  --run it >"$tmp/trainer-pw.log" 2>&1 &
tpid=$!
pids+=($tpid)
sleep 0.5
kill -0 "$tpid" 2>/dev/null || { echo "refused later: the trainer exited with Redis down"; fail=1; }
redis-server --port "$wport" --bind 127.0.0.1 --dir "$tmp" --dbfilename pw.rdb --save '' --appendonly no \
  --requirepass right >"$tmp/redis-pw.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do kill -0 "$tpid" 2>/dev/null || break; sleep 0.05; done
wait "$tpid"; rc=$?
[ $rc -eq 1 ] && grep -q "selroll trainer: redis refused the connection" "$tmp/trainer-pw.log" ||
  { echo "refused later: rc=$rc"; cat "$tmp/trainer-pw.log"; fail=1; }

# Bad flags and start-up failures: one line each, exit 2 (usage) or 1 (runtime).
out=$($S trainer --redis "$RURL" 2>&1); rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ]; } || { echo "missing --push: rc $rc, '$out'"; fail=1; }
out=$($S trainer --push tcp://127.0.0.1:1 --redis "$RURL" --epochs 0 2>&1); rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ]; } || { echo "bad --epochs: rc $rc, '$out'"; fail=1; }
out=$($S trainer --push tcp://127.0.0.1:1 --redis "$RURL" --lr fast 2>&1); rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ]; } || { echo "bad --lr: rc $rc, '$out'"; fail=1; }
out=$($S trainer --push tcp://127.0.0.1:1 --redis "redis:/127.0.0.1" 2>&1); rc=$?
{ [ $rc -eq 1 ] && [ "$(wc -l <<<"$out")" -eq 1 ]; } || { echo "malformed redis URL: rc $rc, '$out'"; fail=1; }
out=$($S trainer --push tcp://127.0.0.1:1 --redis "redis://:wrong@127.0.0.1:$rport" 2>&1); rc=$?
{ [ $rc -eq 1 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q refused <<<"$out"; } ||
  { echo "wrong redis password: rc $rc, '$out'"; fail=1; }
out=$($S trainer --pull "nonsense" --push tcp://127.0.0.1:1 --redis "$RURL" 2>&1); rc=$?
{ [ $rc -eq 1 ] && [ "$(wc -l <<<"$out")" -eq 1 ]; } || { echo "bad --pull: rc $rc, '$out'"; fail=1; }
$S trainer --help | grep -q -- '--beta' || { echo "--help lacks --beta"; fail=1; }

# The example external trainer acks a saved batch (version = policy_version + 1).
xport=$(free_port)
xack=$(free_port)
timeout 30 "$PY" docs/examples/trainer.py --pull "tcp://127.0.0.1:$xport" \
  --push "tcp://127.0.0.1:$xack" --count 1 >"$tmp/example.log" 2>&1 &
xpid=$!
pids+=($xpid)
wait_port "$xport" || { echo "trainer.py did not listen"; cat "$tmp/example.log"; fail=1; }
timeout 30 "$PY" $PUSHER --trainer "tcp://127.0.0.1:$xport" --acks "tcp://127.0.0.1:$xack" \
  send "$tmp/batch.msgpack" --expect-version 1 || { echo "trainer.py did not ack"; fail=1; }
wait "$xpid"; rc=$?
[ $rc -eq 0 ] || { echo "trainer.py exit $rc"; cat "$tmp/example.log"; fail=1; }
grep -q 'acknowledged without training: 3 groups, 12 trajectories' "$tmp/example.log" \
  || { echo "trainer.py did not walk the batch"; cat "$tmp/example.log"; fail=1; }

[ $fail -eq 0 ] && echo "it_trainer: ok"
exit $fail
