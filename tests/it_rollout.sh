#!/usr/bin/env bash
# it_rollout.sh: the rollout loop end to end with real processes (selroll run: 2 env workers, the
# policy server with a fast --time-scale, the coordinator, the gate and 3 actors) on a private
# redis-server, checked by tests/rollout_check.py:
#   paper     one round of 16 groups x G=8 at K=10, d_L=0.12: every group G results on >1 actor;
#             d_K and decision in Redis equal the recomputation from the JSONL
#   enforce   the same with d_L=0.6 so that many groups are cancelled; cancel latency p99 < 20 ms
#   shadow    d_L=0.6: cancel decisions recorded, nothing cancelled, no CANCEL on the bus
#   off       nothing recorded
#   faults    kill -9 of an actor mid-round plus an actor joining mid-round (it gets work);
#             kill -9 of the gate; kill -9 of the coordinator (restarted with --resume);
#             malformed and oversize messages to every socket — each round completes with
#             exactly G results per group
#   local     the paper round with --local-env-workers 1: every actor steps its episodes in env
#             worker code of its own (called on its thread), no env-worker process runs; same checks
#   python    actors against docs/examples/env_worker.py (a Python env worker), coordinated by
#             tests/rollout_pycoord.py
# Set IT_ROLLOUT_ONLY=enforce,shadow,... to run a subset.
set -u
ROOT=$(cd "$(dirname "$0")" && while [ ! -f Makefile ] && [ "$PWD" != / ]; do cd ..; done; pwd)
cd "$ROOT"
S="$ROOT/bin/selroll"
PY=${SELROLL_PYTHON:-/usr/bin/python3}   # the Debian python with python3-zmq and python3-msgpack
T=$(mktemp -d /tmp/selroll-it-rollout-XXXXXX)
fail=0
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.3
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ -n "${RPID:-}" ] && kill "$RPID" 2>/dev/null && wait "$RPID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT

only() { [ -z "${IT_ROLLOUT_ONLY:-}" ] || [[ ",$IT_ROLLOUT_ONLY," == *",$1,"* ]]; }
free_port() { "$PY" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
say() { echo "-- $*"; }
bad() { echo "FAIL $*"; fail=1; }

# A private redis-server that outlives each `selroll run`, so its records can be checked after.
RPORT=$(free_port)
mkdir -p "$T/redis"
redis-server --port "$RPORT" --bind 127.0.0.1 --dir "$T/redis" --save "" --appendonly no \
  >"$T/redis/log" 2>&1 &
RPID=$!
for _ in $(seq 100); do redis-cli -p "$RPORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
REDIS="redis://127.0.0.1:$RPORT"

# start_run NAME ARGS...: starts the bus (a proxy hosted by the recorder, BUS_PID, so no early
# ACTION is missed), then `selroll run` on it in the background (RUN_PID), and reads its endpoints.
start_run() {
  local name=$1; shift
  OUT="$T/$name"
  local pp sp
  pp=$(free_port); sp=$(free_port)
  "$PY" tests/rollout_bus.py --proxy "$pp,$sp" --run "$name" --out "$T/$name.bus" \
    >"$T/$name.busready" 2>&1 &
  BUS_PID=$!
  pids+=("$BUS_PID")
  for _ in $(seq 100); do grep -q ready "$T/$name.busready" 2>/dev/null && break; sleep 0.05; done
  "$S" run --redis "$REDIS" --run "$name" --out "$OUT" --actors 3 --slots 16 --env-workers 2 \
    --groups 16 --group-size 8 --iters 1 --max-steps 30 --grace-ms 3000 \
    --bus-external "tcp://127.0.0.1:$pp,tcp://127.0.0.1:$sp" "$@" \
    >"$T/$name.stdout" 2>"$T/$name.stderr" &
  RUN_PID=$!
  pids+=("$RUN_PID")
  for _ in $(seq 200); do [ -f "$OUT/endpoints.env" ] && break; sleep 0.05; done
  # shellcheck disable=SC1090
  . "$OUT/endpoints.env"
}

# wait_run NAME LIMIT_S: waits for the run to end; fails it when it did not exit 0 in time.
wait_run() {
  local name=$1 limit=$2 i
  for ((i = 0; i < limit * 10; i++)); do kill -0 "$RUN_PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$RUN_PID" 2>/dev/null; then
    bad "$name: selroll run did not finish within $limit s"; kill "$RUN_PID"
  fi
  wait "$RUN_PID"; local rc=$?
  sleep 0.2; kill "$BUS_PID" 2>/dev/null; wait "$BUS_PID" 2>/dev/null
  [ $rc -eq 0 ] || bad "$name: selroll run exited $rc"
  grep -q '^round 0:' "$T/$name.stdout" || bad "$name: no progress line for round 0"
  say "$name: $(grep '^round 0:' "$T/$name.stdout")"
}

check() { "$PY" tests/rollout_check.py --redis "$REDIS" --groups 16 --G 8 "$@" || fail=1; }

# wait_actions NAME N: waits until the bus recording holds N ACTIONs (mid-round).
wait_actions() {
  for _ in $(seq 600); do
    local n; n=$(grep -c '"ACTION"' "$T/$1.bus" 2>/dev/null); n=${n:-0}
    [ "$n" -ge "$2" ] && return 0; sleep 0.05
  done
  bad "$1: fewer than $2 ACTIONs on the bus"
}
# acked_ids: the (job_id, epoch) of every result stored in Redis for round 0 of run ckill, one
# JSON pair per line (redis-cli prints binary values with C escapes, read back with literal_eval).
acked_ids() {
  redis-cli -u "$REDIS" --no-raw LRANGE "selroll:ckill:results:0" 0 -1 | "$PY" -c '
import ast, json, re, sys, msgpack
for line in sys.stdin:
    m = re.match(r"^\s*(?:\d+\)\s*)?(\".*\")\s*$", line)
    if m:
        r = msgpack.unpackb(ast.literal_eval("b" + m.group(1)), raw=False)
        print(json.dumps([r["job_id"], r["epoch"]]))'
}
child_pid() { awk -v n="$2" '$1 == n {print $2}' "$T/$1/children.txt"; }

# The paper's threshold (0.12) cancels few of the built-in policy's groups in one round of 16, so
# the cancel paths (CANCEL, latency, shadow's unenforced cancels) run with d_L = 0.6 as well.
if only paper; then
  say "paper settings (K=10, d_L=0.12): 16 groups x G=8, 3 actors, 2 env workers, policy server, gate"
  start_run pap --time-scale 100 --gate-mode enforce
  wait_run pap 120
  # At --time-scale 100 both cores are busy with the simulated policy, and the paper's threshold
  # cancels one group or none: the cancel latency is reported here and checked in the run below.
  check --run pap --jsonl "$T/pap/rounds/round-0.jsonl" --bus "$T/pap.bus" --mode enforce --spread \
    --latency-ms 0
fi

if only local; then
  say "env workers inside the actors (--local-env-workers 1): 16 groups x G=8, 3 actors"
  start_run loc --time-scale 100 --gate-mode enforce --local-env-workers 1
  wait_run loc 120
  check --run loc --jsonl "$T/loc/rounds/round-0.jsonl" --bus "$T/loc.bus" --mode enforce --spread \
    --latency-ms 0
  ls "$T/loc/logs" | grep -q '^env-worker' && bad "loc: an env-worker process was started"
  for i in 1 2 3; do
    grep -q "1 env workers in this process" "$T/loc/logs/actor-$i.log" ||
      bad "loc: actor-$i does not host its env worker"
  done
fi

if only enforce; then
  say "enforce with d_L=0.6: many groups cancelled, cancel latency"
  # --time-scale 20, not 100: at 100 the simulated policy keeps both cores of the test machine
  # busy and the latency measured is the scheduler's, not the system's.
  start_run enf --time-scale 20 --gate-mode enforce --threshold 0.6
  wait_run enf 120
  check --run enf --jsonl "$T/enf/rounds/round-0.jsonl" --bus "$T/enf.bus" --mode enforce --spread \
    --threshold 0.6
  grep -q 'cancelled [1-9]' "$T/enf.stdout" || bad "enf: no group was cancelled"
fi

if only shadow; then
  say "shadow with d_L=0.6: the same decisions recorded, nothing cancelled"
  start_run sha --time-scale 100 --gate-mode shadow --threshold 0.6
  wait_run sha 120
  check --run sha --jsonl "$T/sha/rounds/round-0.jsonl" --bus "$T/sha.bus" --mode shadow \
    --threshold 0.6
  grep -q 'cancelled 0' "$T/sha.stdout" || bad "sha: a group was cancelled in shadow mode"
fi

if only off; then
  say "off: the gate writes nothing"
  start_run off --time-scale 100 --gate-mode off
  wait_run off 120
  check --run off --jsonl "$T/off/rounds/round-0.jsonl" --bus "$T/off.bus" --mode off
fi

if only actorkill; then
  say "kill -9 of an actor mid-round, and an actor joining mid-round"
  start_run akill --time-scale 10 --lease-ms 1500 --heartbeat-ms 200
  wait_actions akill 100
  victim=$(child_pid akill actor-1)
  [ -n "$victim" ] && kill -9 "$victim" || bad "akill: no actor-1 pid"
  "$S" actor --coordinator "$WORK_EP" --id late-1 --slots 8 --policy "$POLICY_URL" \
    --env-workers "$ENV_WORKERS" >"$T/late-1.log" 2>&1 &
  LATE=$!; pids+=("$LATE")
  wait_run akill 180
  kill "$LATE" 2>/dev/null
  check --run akill --jsonl "$T/akill/rounds/round-0.jsonl" --skip-gate --mode enforce
  grep -Eq "[1-9][0-9]* (requeued|leases expired)" "$T/akill/logs/coordinator.log" \
    && say "akill: the killed actor's jobs were re-queued" \
    || bad "akill: no job was re-queued after the kill"
  n=$(grep -c '"actor_id": "late-1"' "$T/akill.bus")
  [ "$n" -gt 0 ] && say "akill: the late actor published $n ACTIONs" || bad "akill: the late actor got no work"
fi

if only gatekill; then
  say "kill -9 of the gate mid-round: the round still completes"
  start_run gkill --time-scale 10
  wait_actions gkill 50
  g=$(child_pid gkill gate)
  [ -n "$g" ] && kill -9 "$g" || bad "gkill: no gate pid"
  wait_run gkill 180
  check --run gkill --jsonl "$T/gkill/rounds/round-0.jsonl" --skip-gate --mode enforce
fi

if only coordkill; then
  say "kill -9 of the coordinator mid-round: restarted with --resume, no acknowledged result lost"
  start_run ckill --time-scale 10 --lease-ms 3000 --heartbeat-ms 200
  wait_actions ckill 800
  before=$(redis-cli -u "$REDIS" LLEN "selroll:ckill:results:0")
  acked_ids > "$T/ckill.acked"
  c=$(child_pid ckill coordinator)
  [ -n "$c" ] && kill -9 "$c" || bad "ckill: no coordinator pid"
  wait_run ckill 180
  after=$(redis-cli -u "$REDIS" LLEN "selroll:ckill:results:0")
  [ "$after" -ge "$before" ] && say "ckill: $before results acknowledged before the kill, $after after" \
    || bad "ckill: results went from $before to $after"
  grep -q "resume" "$T/ckill/logs/coordinator-1.log" 2>/dev/null || ls "$T/ckill/logs" | grep -q coordinator-1 \
    || bad "ckill: the coordinator was not started again"
  check --run ckill --jsonl "$T/ckill/rounds/round-0.jsonl" --skip-gate --mode enforce
  "$PY" - "$T/ckill.acked" "$T/ckill/rounds/round-0.jsonl" <<'PY' || fail=1
import json, sys
acked = [tuple(json.loads(x)) for x in open(sys.argv[1]) if x.strip()]
final = {(r["job_id"], r["epoch"]) for r in map(json.loads, open(sys.argv[2]))}
lost = [a for a in acked if a not in final]
print(("ok   " if acked and not lost else "FAIL ") + "ckill: %d results acknowledged before the "
      "kill, %d of them missing from the round file %s" % (len(acked), len(lost), lost[:3]))
sys.exit(1 if lost or not acked else 0)
PY
fi

if only malformed; then
  say "malformed and oversize messages to every socket while a round runs"
  start_run junk --time-scale 20
  wait_actions junk 30
  "$PY" - "$WORK_EP" "$BUS_PUB_EP" "$ENV_WORKERS" "$POLICY_URL" <<'PY'
import sys, time, urllib.request, zmq, msgpack
work, bus, envs, policy = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4]
ctx = zmq.Context()
junk = [b"", b"\xc1", b"not msgpack at all", msgpack.packb([1, 2, 3]),
        msgpack.packb({"t": "JOB", "v": 1}), msgpack.packb({"t": "NOPE", "v": 1}),
        msgpack.packb({"t": "RESULT", "v": 1, "job_id": "x" * 100000}),
        msgpack.packb({"t": "HEARTBEAT", "v": 99}), b"\xff" * (2 << 20)]
for ep in [work] + envs:
    d = ctx.socket(zmq.DEALER); d.setsockopt(zmq.LINGER, 500); d.connect(ep)
    for j in junk: d.send(j)
    d.send_multipart([b"a", b"b", b"c"])
p = ctx.socket(zmq.PUB); p.setsockopt(zmq.LINGER, 500); p.connect(bus)
time.sleep(0.3)
for j in junk:
    p.send_multipart([b"act/junk/r0000-g0000", j])
    p.send_multipart([b"ctl/junk/cancel", j])
p.send(b"single frame")
for body in [b"{", b"\x00" * 100000, b'{"model": 3, "messages": "x"}']:
    try:
        urllib.request.urlopen(urllib.request.Request(policy + "/v1/chat/completions", data=body,
                               headers={"Content-Type": "application/json"}), timeout=5)
    except Exception:
        pass
time.sleep(0.5)
PY
  wait_run junk 180
  check --run junk --jsonl "$T/junk/rounds/round-0.jsonl" --mode enforce
  grep -qi "bad\|malformed\|refused" "$T/junk/logs/coordinator.log" && say "junk: the coordinator counted bad messages" \
    || bad "junk: the coordinator log says nothing of the bad messages"
  grep -q "[1-9][0-9]* bad messages" "$T/junk/logs/gate.log" && say "junk: the gate counted bad messages" \
    || bad "junk: the gate counted no bad message"
fi

if only python; then
  say "actors against docs/examples/env_worker.py"
  EP_PORT=$(free_port)
  "$PY" docs/examples/env_worker.py --bind "tcp://127.0.0.1:$EP_PORT" --capacity 32 >"$T/pyenv.log" 2>&1 &
  pids+=($!)
  PP=$(free_port)
  "$S" policy-server --listen "127.0.0.1:$PP" --time-scale 100 >"$T/pypolicy.log" 2>&1 &
  pids+=($!)
  "$PY" tests/rollout_pycoord.py --env-worker "tcp://127.0.0.1:$EP_PORT" \
    --tasks counter/2,counter/3,counter/1 --jobs 12 --max-steps 10 --timeout 90 >"$T/pyco.out" 2>&1 &
  PYCO=$!; pids+=("$PYCO")
  for _ in $(seq 100); do grep -q '^work=' "$T/pyco.out" && break; sleep 0.05; done
  WEP=$(sed -n 's/^work=//p' "$T/pyco.out")
  for i in 1 2; do
    "$S" actor --coordinator "$WEP" --id "py-actor-$i" --slots 4 --policy "http://127.0.0.1:$PP" \
      >"$T/py-actor-$i.log" 2>&1 &
    pids+=($!)
  done
  wait "$PYCO"; rc=$?
  cat "$T/pyco.out" | grep pycoord
  [ $rc -eq 0 ] && say "python: actors ran every episode on the Python env worker" || bad "python: pycoord exit $rc"
fi

if [ $fail -ne 0 ]; then
  echo "logs kept in $T.failed"; cp -r "$T" "$T.failed" 2>/dev/null
fi
exit $fail
