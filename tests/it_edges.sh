#!/usr/bin/env bash
# it_edges.sh: exactly-once and cancel at the edges (docs/redis.md, docs/protocol.md). A real
# `selroll coordinator`, a private redis-server, synthetic actors (tests/py/noblock_actor.py) on
# the work channel; every check of the stored results by tests/py/exactly_once.py.
#  1. Redis stopped (SIGSTOP) once the first JOBs went out, before their RESULTs, for longer than the 2 s
#     Redis timeout, so the RESULTs that come meanwhile are appended and time out with their
#     outcome unknown (the commands land once Redis runs again: checked); the coordinator is
#     killed (SIGKILL) inside the stall once a RESULT store timed out, Redis goes on, a new coordinator resumes the run (--resume, the
#     same endpoints) and the actor's RESULTs, sent again, are acknowledged: every group done with
#     G results, one copy and one epoch per job.
#  2. The same with the actor killed too inside the stall, after its RESULTs reached the
#     coordinator; a new actor joins the resumed coordinator and runs what was not stored (it
#     stays up while idle for 10 s: the dead actor's jobs come back only when their leases
#     expire, 2 s, and then wait ~1.25 s for a second actor).
#  3. A lost CANCEL: the actor never subscribes to the bus, so the gate's CANCEL (published by this
#     script after moving the group to cancelled in Redis, as the gate does) reaches only the
#     coordinator; the actor learns it from the coordinator's reply to its HEARTBEAT (300 ms), its
#     8 s episodes stop within 1 s, the group ends cancelled with G results and the run ends.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
t0=$(date +%s)
it_redis_start
rpid=${pids[-1]}

# coord RUN ITERS GROUPS G [ARGS...]: a coordinator on the ports wp/pp/sp (set by ports), leases
# of 2 s, heartbeats of 300 ms; sets cpid and work.
ports() { wp=$(free_port); pp=$(free_port); sp=$(free_port); }
coord() {
  local run=$1 iters=$2 groups=$3 g=$4 log
  shift 4
  log="$tmp/coord-$run-$(date +%s%N).log"
  $S coordinator --redis "$RURL" --run "$run" --work-bind "tcp://127.0.0.1:$wp" \
    --bus-pub-bind "tcp://127.0.0.1:$pp" --bus-sub-bind "tcp://127.0.0.1:$sp" --http off \
    --out "$tmp/out-$run" --iters "$iters" --groups "$groups" --group-size "$g" --lease-ms 2000 \
    --heartbeat-ms 300 --env-workers tcp://127.0.0.1:9 "$@" 2>"$log" &
  cpid=$!
  pids+=($cpid)
  clog=$log
  for _ in $(seq 100); do
    grep -q "coordinator of run" "$log" && { work="tcp://127.0.0.1:$wp"; return 0; }
    sleep 0.05
  done
  echo "coordinator did not start"; cat "$log"; exit 1
}
# actors NAME ARGS...: synthetic actors on the work channel; sets apid
actors() {
  local name=$1
  shift
  "$PY" tests/py/noblock_actor.py --work "$work" --name "$name" "$@" >"$tmp/actors-$name.json" \
    2>"$tmp/actors-$name.err" &
  apid=$!
  pids+=($apid)
}
# jobs_out RUN N: until N leases of round 0 are persisted (10 s at most), then 0.1 s for their
# JOBs to reach the actor: its RESULTs come 0.4 s later
jobs_out() {
  for _ in $(seq 500); do
    [ "$($R hlen "selroll:$1:lease:0")" -ge "$2" ] 2>/dev/null && { sleep 0.1; return 0; }
    sleep 0.02
  done
  return 1
}
# wait_coord: waits for the coordinator (40 s at most, then kills it); sets crc
wait_coord() {
  for _ in $(seq 400); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$cpid" 2>/dev/null && { echo "the coordinator did not finish in 40 s"; kill -KILL "$cpid"; }
  wait "$cpid"; crc=$?
}
check() { "$PY" tests/py/exactly_once.py --port "$rport" "$@"; }
# timed_out LOG: until the coordinator logs a RESULT store that timed out (8 s at most)
timed_out() {
  for _ in $(seq 160); do grep -q "cannot store RESULT" "$1" && return 0; sleep 0.05; done
  return 1
}

# ---- 1. a RESULT append across the Redis timeout, the coordinator killed and resumed -------
ports
coord kr 1 4 4
log1=$clog
actors kr --run kr --actors 1 --slots 8 --job-ms 400 --seconds 40
jobs_out kr 8 || bad "resume: no JOB went out"
n0=$($R llen selroll:kr:results:0)
kill -STOP "$rpid"
# RESULTs come in; once one append outlived the 2 s timeout (after a lease batch's, maybe)
if timed_out "$log1"; then ok "resume: a RESULT store outlived the Redis timeout"
else bad "resume: no RESULT store timed out (the stall missed the RESULTs?)"; fi
kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
kill -CONT "$rpid"
sleep 0.3
n1=$($R llen selroll:kr:results:0)
[ "$n1" -gt "$n0" ] && ok "resume: appends that timed out landed once Redis ran again ($n0 -> $n1 stored)" ||
  bad "resume: no append landed after the stall ($n0 -> $n1)"
coord kr 1 4 4 --resume
wait_coord
wait "$apid"
[ $crc -eq 0 ] && ok "resume: the resumed coordinator finished the run (exit 0)" ||
  { bad "resume: resumed coordinator exit $crc"; tail -20 "$clog"; }
grep -q "leases of the previous coordinator kept" "$clog" &&
  ok "resume: the previous coordinator's leases were kept" || bad "resume: no lease re-adopted"
"$PY" - "$(cat "$tmp/actors-kr.json")" <<'PYEOF' && ok "resume: every RESULT acknowledged ok" || bad "resume: acks: $(cat "$tmp/actors-kr.json")"
import json, sys
o = json.loads(sys.argv[1])
sys.exit(0 if o["unacked"] == 0 and o["ack_refused"] == 0 and o["ack_ok"] == 16 else 1)
PYEOF
out=$(check --run kr --rounds 1 --groups 4 --size 4) &&
  ok "resume: 4 groups done with 4 results each, one copy and one epoch per job" ||
  bad "resume: $out"

# ---- 2. the same with the actor killed inside the stall -------------------------------------
ports
coord ka 1 4 4
log2=$clog
actors ka --run ka --actors 1 --slots 8 --job-ms 400 --seconds 40
jobs_out ka 8 || bad "actor killed: no JOB went out"
kill -STOP "$rpid"
sleep 0.8 # the running jobs end: their RESULTs reach the coordinator, unstored
kill -KILL "$apid"; wait "$apid" 2>/dev/null
if timed_out "$log2"; then ok "actor killed: a RESULT store outlived the Redis timeout"
else bad "actor killed: no RESULT store timed out"; fi
kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
kill -CONT "$rpid"
coord ka 1 4 4 --resume
actors kb --run ka --actors 1 --slots 8 --job-ms 100 --seconds 40 --idle-seconds 10
wait_coord
wait "$apid"
[ $crc -eq 0 ] && ok "actor killed: the resumed coordinator finished the run (exit 0)" ||
  { bad "actor killed: resumed coordinator exit $crc"; tail -20 "$clog"; }
out=$(check --run ka --rounds 1 --groups 4 --size 4) &&
  ok "actor killed: 4 groups done with 4 results each, one copy and one epoch per job" ||
  bad "actor killed: $out"

# ---- 3. a lost CANCEL ------------------------------------------------------------------------
ports
coord lc 1 1 4
actors lc --run lc --actors 1 --slots 8 --job-ms 8000 --seconds 30
for _ in $(seq 250); do [ "$($R hlen selroll:lc:lease:0)" = 4 ] && break; sleep 0.02; done
sleep 0.3 # the JOBs reach the actor
$R hset selroll:lc:group:r0000-g0000 status cancelled step 2 d 0.5 decision converged >/dev/null
sent=$("$PY" - "tcp://127.0.0.1:$pp" <<'PYEOF'
import sys, time, msgpack, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.PUB)
s.setsockopt(zmq.LINGER, 1000)
s.connect(sys.argv[1])
time.sleep(0.5)  # the connection is made (a PUB drops what it sends before)
t = time.time()
s.send_multipart([b"ctl/lc/cancel", msgpack.packb({"t": "CANCEL", "v": 1, "run": "lc",
    "group": "r0000-g0000", "step": 2, "d": 0.5, "reason": "converged"})])
print(t)
s.close(); ctx.term()
PYEOF
)
wait_coord
wait "$apid"
[ $crc -eq 0 ] && ok "lost CANCEL: the coordinator finished the run (exit 0)" ||
  { bad "lost CANCEL: coordinator exit $crc"; tail -20 "$clog"; }
"$PY" - "$(cat "$tmp/actors-lc.json")" "$sent" <<'PYEOF' && ok "lost CANCEL: told on the work channel, 4 episodes stopped ($(cat "$tmp/actors-lc.json"))" || bad "lost CANCEL: $(cat "$tmp/actors-lc.json"), sent at $sent"
import json, sys
o, sent = json.loads(sys.argv[1]), float(sys.argv[2])
ms = (o["cancel_first"] - sent) * 1000 if o["cancel_first"] else -1
print("the actor learnt the CANCEL %.0f ms after it was published" % ms, file=sys.stderr)
sys.exit(0 if o["cancelled"] == 4 and 0 <= ms < 1000 and o["unacked"] == 0 else 1)
PYEOF
grep -q "groups 0 done, 1 cancelled" "$clog" && ok "lost CANCEL: the round ended with the group cancelled" ||
  bad "lost CANCEL: $(grep 'round 0 done' "$clog")"
out=$(check --run lc --rounds 1 --groups 1 --size 4 --cancelled r0000-g0000) &&
  ok "lost CANCEL: the group cancelled with 4 results, one copy and one epoch each" ||
  bad "lost CANCEL: $out"
echo "it_edges: $(( $(date +%s) - t0 )) s"
exit $fail
