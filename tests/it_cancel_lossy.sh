#!/usr/bin/env bash
# it_cancel_lossy.sh: a CANCEL lost on the bus still reaches the actors. A real `selroll
# coordinator`, a private redis-server and tests/py/cancel_lossy.py: an actor holding the 4 jobs of
# a group, behind a relay between the coordinator's bus and the actor that drops the first CANCEL.
#  1. plain: the gate's CANCEL is dropped on its way to the actor; the coordinator, which heard
#     it, checked Redis and sees the group's trajectories still running, publishes it again: the
#     actor receives it (with the gate's reason) through the same relay.
#  2. CURVE (--curve-keys): the same, every socket facing the coordinator authenticated; the
#     re-announced CANCEL (the coordinator's own key) passes the bus proxy, which refuses CANCELs
#     from other keys than the gate's and the coordinator's.
# time limit: 120 s
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_redis_start

# lossy RUN [KEYS]: one coordinator and the scenario; prints the scenario's JSON line
lossy() {
  local run=$1 keys=${2:-} cw cb1 cb2 cpid res
  cw=$(free_port); cb1=$(free_port); cb2=$(free_port)
  $S coordinator --redis "$RURL" --run "$run" ${keys:+--curve-keys "$keys"} \
    --work-bind "tcp://127.0.0.1:$cw" --bus-pub-bind "tcp://127.0.0.1:$cb1" \
    --bus-sub-bind "tcp://127.0.0.1:$cb2" --http off --iters 1 --groups 1 --group-size 4 \
    --lease-ms 10000 --env-workers tcp://127.0.0.1:9 --out "$tmp/out-$run" >"$tmp/coord-$run.log" 2>&1 &
  cpid=$!
  pids+=($cpid)
  for _ in $(seq 100); do grep -q "coordinator of run" "$tmp/coord-$run.log" && break; sleep 0.05; done
  res=$("$PY" tests/py/cancel_lossy.py --work "tcp://127.0.0.1:$cw" --bus-pub "tcp://127.0.0.1:$cb1" \
    --bus-sub "tcp://127.0.0.1:$cb2" --redis-port "$rport" --run "$run" ${keys:+--keys "$keys"} \
    2>"$tmp/lossy-$run.err")
  kill "$cpid"; wait "$cpid" 2>/dev/null
  echo "$res"
}

check() { # check JSON: 4 jobs held, the first CANCEL dropped, the actor got the gate's CANCEL
  "$PY" -c 'import json,sys; o=json.loads(sys.argv[1]); sys.exit(0 if o["jobs"] == 4 and o["dropped"] == 1 and o["forwarded"] >= 1 and o["actor_cancels"] >= 1 and o["reasons"] == ["converged"] else 1)' "$1"
}

res=$(lossy lossy-plain)
check "$res" && ok "plain: the first CANCEL lost, the re-announced one reached the actor ($res)" ||
  { bad "plain: $res"; tail -5 "$tmp/coord-lossy-plain.log"; cat "$tmp/lossy-lossy-plain.err"; }

K="$tmp/keys"
$S keygen "$K" >/dev/null || bad "keygen"
res=$(lossy lossy-curve "$K")
check "$res" && ok "CURVE: the first CANCEL lost, the re-announced one passed the proxy and reached the actor ($res)" ||
  { bad "CURVE: $res"; tail -5 "$tmp/coord-lossy-curve.log"; cat "$tmp/lossy-lossy-curve.err"; }
exit $fail
