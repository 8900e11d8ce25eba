#!/usr/bin/env bash
# it_resume_stall.sh: a coordinator killed and resumed inside a Redis stall loses nothing and
# stores nothing twice. A real `selroll coordinator`, a private redis-server (SIGSTOPped), synthetic
# actors (tests/py/noblock_actor.py) that keep their identity across the restart.
#  1. Mid-run (2 rounds x 6 groups x 4, 2 actors x 4 slots of 800 ms jobs), Redis is stopped, the
#     coordinator is killed with SIGKILL and started again with --resume on the same work
#     endpoint while Redis is still stopped. It starts its loop without Redis (the run record and
#     the round's opening wait on the store thread): a HELLO probe is answered within 50 ms (p99)
#     from then until Redis continues. Then every group of both rounds ends done with 4 results,
#     one stored copy and one final epoch per job (tests/py/exactly_once.py).
# time limit: 240 s
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_redis_start
rpid=${pids[-1]}
stall="$tmp/stall"
wport=$(free_port)
free="--work-bind tcp://127.0.0.1:$wport --bus-pub-bind tcp://127.0.0.1:* --bus-sub-bind tcp://127.0.0.1:* --http off"
work="tcp://127.0.0.1:$wport"

coord() { # coord LOG [--resume]: starts the coordinator of run rs, sets cpid
  $S coordinator --redis "$RURL" --run rs $free --out "$tmp/out" --iters 2 --groups 6 \
    --group-size 4 --lease-ms 2000 --heartbeat-ms 300 --env-workers tcp://127.0.0.1:9 ${2:-} \
    2>"$tmp/$1" &
  cpid=$!
  pids+=($cpid)
}

# wait_line LOG SECONDS TEXT: until the coordinator logged TEXT
wait_line() {
  for _ in $(seq $(($2 * 20))); do
    grep -q "$3" "$tmp/$1" && return 0
    sleep 0.05
  done
  return 1
}

coord coord-1.log
wait_line coord-1.log 5 "coordinator of run rs" || { echo "coordinator did not start"; cat "$tmp/coord-1.log"; exit 1; }
"$PY" tests/py/noblock_actor.py --work "$work" --run rs --actors 2 --slots 4 --job-ms 800 \
  --seconds 90 --probe-ms 50 --stall-file "$stall" --idle-seconds 10 --name rs \
  >"$tmp/actors.json" 2>"$tmp/actors.err" &
apid=$!
pids+=($apid)
sleep 2.0 # the first jobs are stored, others run
stored_before=$($R llen selroll:rs:results:0)
kill -STOP "$rpid"
t_stop=$(date +%s.%N)
sleep 0.3 # RESULTs reach the coordinator and wait for Redis
kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
coord coord-2.log --resume
# its start-up check finds Redis silent (after the 2 s timeout); the loop starts right after
if wait_line coord-2.log 8 "the run starts once Redis answers"; then
  sleep 0.1
  touch "$stall" # from here the loop runs while Redis is stopped
  started_in_stall=1
else
  started_in_stall=0
fi
# Redis stays stopped 5.5 s in all (more than the 2 s command timeout), then continues
sleep "$("$PY" -c "import time; print(max(0.5, 5.5 - (time.time() - $t_stop)))")"
kill -CONT "$rpid"; rm -f "$stall"
for _ in $(seq 900); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
wait "$cpid"; crc=$?
wait "$apid"
out=$(cat "$tmp/actors.json")

[ "$stored_before" -gt 0 ] && ok "restart: $stored_before results stored before the stall" ||
  bad "restart: nothing stored before the stall (the scenario missed)"
[ $started_in_stall = 1 ] &&
  ok "restart: the resumed coordinator ran its loop while Redis was stopped" ||
  { bad "restart: the resumed coordinator did not start inside the stall"; tail -5 "$tmp/coord-2.log"; }
grep -q "resuming run rs" "$tmp/coord-2.log" && ok "restart: the run was resumed once Redis answered" ||
  bad "restart: no resume line"
[ $crc -eq 0 ] && ok "restart: the resumed coordinator finished the run (exit 0)" ||
  { bad "restart: coordinator exit $crc"; tail -20 "$tmp/coord-2.log"; }
"$PY" - "$out" <<'EOF' && ok "restart: HELLOs answered within 50 ms (p99) while the resumed loop waited for Redis ($out)" || bad "restart: probe: $out"
import json, sys
o = json.loads(sys.argv[1])
sys.exit(0 if o["stall_n"] >= 10 and o["stall_p99"] < 50 and o["stall_max"] < 250 and
         o["unacked"] == 0 else 1)
EOF
"$PY" tests/py/exactly_once.py --port "$rport" --run rs --rounds 2 --groups 6 --size 4 &&
  ok "restart: 2 rounds x 6 groups done with 4 results each, one copy and one epoch per job" ||
  { bad "restart: groups or stored results wrong"; tail -20 "$tmp/coord-2.log"; }
exit $fail
