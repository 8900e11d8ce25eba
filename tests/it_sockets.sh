#!/usr/bin/env bash
# it_sockets.sh: `selroll run --sockets unix` end to end (real processes, private redis-server):
# the env workers, the coordinator's work socket and the bus on Unix sockets (ipc://) in the run's
# private folder, spoken by zmtp (common/zmtp.c) and the bus proxy (libzmq); the private
# redis-server and the built-in policy server on Unix sockets there too.
#   flags   a bad --sockets value exits 2 with one line
#   short   the default (no --sockets), 2 rounds of 6 groups x G=4: exits 0, every trajectory done
#           (none failed), OUT/endpoints.env names ipc:// endpoints for work, bus and env workers, a
#           unix:// Redis URL and a unix: policy URL, the env workers serve on them, and the socket
#           folder is gone after
#   tcp     SELROLL_SOCKETS=tcp, the same run: every endpoint and URL on 127.0.0.1 TCP, every
#           trajectory done
#   kill    --sockets unix, one round of 16 groups x G=8: kill -9 of env-worker-1 (restarted on
#           the socket file its predecessor left) and of actor-1 mid-round (its jobs re-queued):
#           the round completes with every trajectory done, as over TCP (it_rollout.sh actorkill)
# time limit: 150 s
set -u
ROOT=$(cd "$(dirname "$0")" && while [ ! -f Makefile ] && [ "$PWD" != / ]; do cd ..; done; pwd)
cd "$ROOT"
S="$ROOT/bin/selroll"
T=$(mktemp -d /tmp/selroll-it-sockets-XXXXXX)
fail=0
RUN_PID=""
cleanup() {
  [ -n "$RUN_PID" ] && kill "$RUN_PID" 2>/dev/null && wait "$RUN_PID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
say() { echo "-- $*"; }
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# wait_env OUT: waits for OUT/endpoints.env and reads it.
wait_env() {
  for _ in $(seq 200); do grep -qs '^OUT=' "$1/endpoints.env" && break; sleep 0.05; done
  grep -qs '^OUT=' "$1/endpoints.env" || { bad "no $1/endpoints.env"; return 1; }
  # shellcheck disable=SC1090
  . "$1/endpoints.env"
}

# check_eps NAME: the endpoints of the run's own channels are ipc:// in one private folder.
check_eps() {
  local e all=1
  for e in "$WORK_EP" "$BUS_PUB_EP" "$BUS_SUB_EP" ${ENV_WORKERS//,/ }; do
    [[ $e == ipc:///tmp/selroll-sock-*/* ]] || { bad "$1: endpoint $e is not ipc:// in the run's folder"; all=0; }
  done
  [ "$all" = 1 ] && ok "$1: work, bus and env endpoints are ipc:// ($WORK_EP ...)"
  SOCK_DIR=$(dirname "${WORK_EP#ipc://}")
}

# check_rounds NAME STDOUT N: each round line says N trajectories, none failed, no failed group.
check_rounds() {
  local lines
  lines=$(grep -c '^round [0-9]*:' "$2")
  [ "$lines" -ge 1 ] || { bad "$1: no round line"; return; }
  if grep '^round [0-9]*:' "$2" | grep -v "failed 0), trajectories $3 (failed 0)" | grep -q .; then
    bad "$1: a round with failed groups or trajectories: $(grep '^round' "$2" | tr '\n' ' ')"
  else
    ok "$1: $lines round(s), each with $3 trajectories done and none failed"
  fi
}

if [ ! -x "$S" ]; then echo "SKIP: no $S (run make)"; exit 77; fi

# rcli ARGS...: redis-cli on REDIS_URL, a redis:// or a unix:// one
rcli() {
  case $REDIS_URL in
    unix://*) redis-cli -s "${REDIS_URL#unix://}" "$@" ;;
    *) redis-cli -u "$REDIS_URL" "$@" ;;
  esac
}

out=$("$S" run --sockets pipes --groups 1 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && ok "flags: run --sockets pipes: exit 2, one line" \
  || bad "flags: run --sockets pipes: rc=$rc out=$out"

say "short: selroll run (the default sockets), 2 rounds of 6 groups x G=4"
env -u SELROLL_SOCKETS "$S" run --out "$T/a" --run socka --actors 2 --slots 8 --env-workers 2 \
  --groups 6 --group-size 4 --iters 2 --http off --time-scale 100 >"$T/a.out" 2>"$T/a.err" &
RUN_PID=$!
wait_env "$T/a" && check_eps short
[[ $REDIS_URL == unix://$SOCK_DIR/redis.sock ]] && ok "short: the children reach Redis at $REDIS_URL" \
  || bad "short: REDIS_URL=$REDIS_URL"
[[ $POLICY_URL == unix:$SOCK_DIR/policy.sock ]] && ok "short: the actors reach the policy at $POLICY_URL" \
  || bad "short: POLICY_URL=$POLICY_URL"
wait "$RUN_PID"; rc=$?; RUN_PID=""
[ $rc -eq 0 ] && ok "short: selroll run exited 0" || { bad "short: selroll run exited $rc"; tail -5 "$T/a.err"; }
check_rounds short "$T/a.out" 24
for i in 1 2; do
  grep -q "serving on ipc://$SOCK_DIR/env-worker-$i " "$T/a/logs/env-worker-$i.log" ||
    bad "short: env-worker-$i does not serve on its Unix socket"
done
[ -n "${SOCK_DIR:-}" ] && [ ! -e "$SOCK_DIR" ] && ok "short: the socket folder $SOCK_DIR is gone" ||
  bad "short: the socket folder ${SOCK_DIR:-?} is still there: $(ls "${SOCK_DIR:-/nonexistent}" 2>&1)"

say "tcp: SELROLL_SOCKETS=tcp selroll run, 2 rounds of 6 groups x G=4"
SELROLL_SOCKETS=tcp "$S" run --out "$T/t" --run sockt --actors 2 --slots 8 --env-workers 2 \
  --groups 6 --group-size 4 --iters 2 --http off --time-scale 100 >"$T/t.out" 2>"$T/t.err" &
RUN_PID=$!
if wait_env "$T/t"; then
  all=1
  for e in "$WORK_EP" "$BUS_PUB_EP" "$BUS_SUB_EP" ${ENV_WORKERS//,/ }; do
    [[ $e == tcp://127.0.0.1:* ]] || { bad "tcp: endpoint $e is not loopback TCP"; all=0; }
  done
  [[ $REDIS_URL == redis://127.0.0.1:* ]] || { bad "tcp: REDIS_URL=$REDIS_URL"; all=0; }
  [[ $POLICY_URL == http://127.0.0.1:* ]] || { bad "tcp: POLICY_URL=$POLICY_URL"; all=0; }
  [ "$all" = 1 ] && ok "tcp: every endpoint and URL on loopback TCP ($WORK_EP, $REDIS_URL, $POLICY_URL ...)"
fi
wait "$RUN_PID"; rc=$?; RUN_PID=""
[ $rc -eq 0 ] && ok "tcp: selroll run exited 0" || { bad "tcp: selroll run exited $rc"; tail -5 "$T/t.err"; }
check_rounds tcp "$T/t.out" 24

say "kill: kill -9 of env-worker-1 and of actor-1 mid-round (--sockets unix)"
"$S" run --out "$T/k" --run sockk --actors 3 --slots 16 --env-workers 2 --groups 16 --group-size 8 \
  --iters 1 --max-steps 30 --http off --time-scale 10 --lease-ms 1500 --heartbeat-ms 200 \
  --grace-ms 3000 --sockets unix >"$T/k.out" 2>"$T/k.err" &
RUN_PID=$!
if wait_env "$T/k"; then
  check_eps kill
  # mid-round: some results stored, the round far from done (128 trajectories at --time-scale 10)
  for _ in $(seq 300); do
    n=$(rcli LLEN "selroll:sockk:results:0" 2>/dev/null); n=${n:-0}
    [ "$n" -ge 4 ] && break; sleep 0.05
  done
  pid_of() { awk -v n="$1" '$1 == n {print $2}' "$T/k/children.txt"; }
  e=$(pid_of env-worker-1); a=$(pid_of actor-1)
  [ -n "$e" ] && kill -9 "$e" || bad "kill: no env-worker-1 pid"
  sleep 0.3
  [ -n "$a" ] && kill -9 "$a" || bad "kill: no actor-1 pid"
  say "kill: killed env-worker-1 ($e) and actor-1 ($a) with $n results stored"
fi
for _ in $(seq 1200); do kill -0 "$RUN_PID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$RUN_PID" 2>/dev/null && bad "kill: selroll run did not finish within 120 s"
wait "$RUN_PID"; rc=$?; RUN_PID=""
[ $rc -eq 0 ] && ok "kill: selroll run exited 0" || { bad "kill: selroll run exited $rc"; tail -5 "$T/k.err"; }
check_rounds kill "$T/k.out" 128
n=$(grep -c "serving on ipc://$SOCK_DIR/env-worker-1 " "$T/k/logs/env-worker-1.log")
[ "$n" -ge 2 ] && ok "kill: env-worker-1 was restarted on its Unix socket ($n starts)" ||
  bad "kill: env-worker-1 served $n times on its Unix socket (2 wanted)"
grep -q "restarted actor-1" "$T/k.err" && ok "kill: actor-1 was restarted" || bad "kill: actor-1 was not restarted"
grep -Eq "[1-9][0-9]* (requeued|leases expired)" "$T/k/logs/coordinator.log" &&
  ok "kill: the killed actor's jobs were re-queued" || bad "kill: no job was re-queued after the kill"
[ -n "${SOCK_DIR:-}" ] && [ ! -e "$SOCK_DIR" ] && ok "kill: the socket folder is gone" ||
  bad "kill: the socket folder ${SOCK_DIR:-?} is still there"

[ $fail -eq 0 ] && echo "it_sockets: all checks passed" || echo "it_sockets: FAILED"
exit $fail
