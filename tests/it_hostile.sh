#!/usr/bin/env bash
# it_hostile.sh: hostile input during a running round (docs/security.md). `selroll run` (1 env
# worker, the policy server, the coordinator, the gate, 2 actors) plus a standalone `selroll
# trainer`; while the round runs, tests/py/hostile.py sends HOSTILE_N (10,000) random and mutated
# messages to each socket at once: the coordinator's work ROUTER, the bus (XSUB side), the env
# worker's ROUTER, the trainer's PULL and the policy server's HTTP port. Checks: no process
# crashes, the round completes with every group finished, and the roles counted the errors (read
# from their logs' final counter lines until /metrics is served over HTTP), and the work channel
# ignored the peer that kept sending garbage. Budget: 60 s.
set -u
ROOT=$(cd "$(dirname "$0")" && while [ ! -f Makefile ] && [ "$PWD" != / ]; do cd ..; done; pwd)
cd "$ROOT"
S="$ROOT/bin/selroll"
PY=${SELROLL_PYTHON:-/usr/bin/python3}
N=${HOSTILE_N:-10000}
T=$(mktemp -d /tmp/selroll-it-hostile-XXXXXX)
fail=0
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.3
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
say() { echo "-- $*"; }
bad() { echo "FAIL $*"; fail=1; }
free_port() { "$PY" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
t0=$(date +%s)

"$S" run --out "$T/r" --run hostile --actors 2 --slots 8 --env-workers 1 --groups 6 \
  --group-size 4 --iters 1 --max-steps 25 --time-scale 4 --lease-ms 3000 --grace-ms 2000 \
  >"$T/run.out" 2>"$T/run.err" &
RUN_PID=$!
pids+=("$RUN_PID")
for _ in $(seq 400); do grep -qs '^OUT=' "$T/r/endpoints.env" && break; sleep 0.05; done
grep -qs '^OUT=' "$T/r/endpoints.env" || { bad "no endpoints.env"; cat "$T/run.err"; exit 1; }
# shellcheck disable=SC1090
. "$T/r/endpoints.env"

TP=$(free_port)
"$S" trainer --pull "tcp://127.0.0.1:$TP" --push "tcp://127.0.0.1:$(free_port)" \
  --redis "$REDIS_URL" --run hostile >"$T/trainer.out" 2>"$T/trainer.err" &
TRAINER_PID=$!
pids+=("$TRAINER_PID")
for _ in $(seq 100); do grep -qs "^trainer: run" "$T/trainer.out" && break; sleep 0.05; done

# Wait until the round is under way (the policy server has answered some steps).
for _ in $(seq 200); do
  grep -q "joined" "$T/r/logs/coordinator.log" 2>/dev/null && break; sleep 0.05
done

say "hostile: $N messages to each of work, bus, env, trainer and HTTP during the round"
"$PY" tests/py/hostile.py --n "$N" --work "$WORK_EP" --bus "$BUS_PUB_EP" --env "$ENV_WORKERS" \
  --trainer "tcp://127.0.0.1:$TP" --http "$POLICY_URL" --seeds tests/fuzz/corpus/fuzz_proto --run hostile \
  >"$T/hostile.out" 2>&1 || bad "hostile.py: $(tail -n 3 "$T/hostile.out")"
sed 's/^/   /' "$T/hostile.out"
kill -0 "$RUN_PID" 2>/dev/null || say "(the round ended before the last message was sent)"
if kill -0 "$RUN_PID" 2>/dev/null; then
  curl -sf "$POLICY_URL/health" >/dev/null 2>&1 && say "policy server still answers /health" \
    || bad "policy server does not answer /health after the attack"
fi

for _ in $(seq 450); do kill -0 "$RUN_PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$RUN_PID" 2>/dev/null; then
  bad "selroll run did not finish within 45 s of the attack"; kill "$RUN_PID"
fi
wait "$RUN_PID"; rc=$?
[ $rc -eq 0 ] || bad "selroll run exited $rc: $(tail -n 3 "$T/run.err")"
line=$(grep '^round 0:' "$T/run.out")
say "$line"
echo "$line" | grep -q 'groups 6 (done 6, cancelled 0, failed 0)\|groups 6 (done [0-6], cancelled [0-6], failed 0)' \
  || bad "round 0 did not finish every group: $line"
grep -q "crashed\|signal 11\|signal 6\|SIGSEGV\|SIGABRT" "$T/run.err" "$T"/r/logs/*.log \
  && bad "a process crashed: $(grep -h "crashed\|signal 11\|signal 6" "$T/run.err" "$T"/r/logs/*.log | head -n 2)"

kill -TERM "$TRAINER_PID" 2>/dev/null; wait "$TRAINER_PID" 2>/dev/null
kill -0 "$TRAINER_PID" 2>/dev/null && bad "trainer did not stop"

# The error counters (from the roles' final counter lines).
coord=$(grep -o '[0-9]* bad messages' "$T/r/logs/coordinator.log" | tail -n 1)
gate=$(grep -o '[0-9]* bad messages' "$T/r/logs/gate.log" | tail -n 1)
envw=$(grep -o '[0-9]* errors (' "$T"/r/logs/env-worker-1.log | tail -n 1)
actor=$(grep -ho 'bad messages work [0-9]* bus [0-9]* env [0-9]*' "$T"/r/logs/actor-*.log | head -n 1)
trainer=$(grep -o '[0-9]* discarded messages' "$T/trainer.out" | tail -n 1)
say "counted: coordinator ${coord:-?}, gate ${gate:-?}, env worker ${envw:-?}, actor-1 ${actor:-?}, trainer ${trainer:-?}"
[ "${coord%% *}" -gt 0 ] 2>/dev/null || bad "coordinator counted no bad message"
[ "${gate%% *}" -gt 0 ] 2>/dev/null || bad "gate counted no bad message"
[ "${envw%% *}" -gt 0 ] 2>/dev/null || bad "env worker counted no error"
[ "${trainer%% *}" -gt 0 ] 2>/dev/null || bad "trainer counted no garbage"
echo "$actor" | grep -q 'bus [1-9]' || bad "actor counted no bad bus message: $actor"
grep -q "ignoring a peer" "$T/r/logs/coordinator.log" && say "coordinator: the garbage peer was ignored" \
  || bad "coordinator never ignored the peer that kept sending garbage"
grep -q "ignoring a client" "$T/r/logs/env-worker-1.log" && say "env worker: the garbage client was ignored" \
  || bad "env worker never ignored the client that kept sending garbage"

say "it_hostile: $(( $(date +%s) - t0 )) s"
[ $fail -eq 0 ] && echo "it_hostile: ok" || echo "it_hostile: FAILED"
exit $fail
