#!/usr/bin/env bash
# it_cluster.sh: selroll across hosts. The test makes four Linux network namespaces joined by a
# bridge: a switch (the bridge), a head host 10.77.0.1 (redis-server with AOF on, coordinator,
# gate, trainer) and two worker hosts 10.77.0.2 and 10.77.0.3 (an env worker, a policy server and
# actors each). Every role is its own `selroll ROLE` process, as on a real cluster. Phases:
#   train    two training iterations (pre-filter, gate, batch, built-in trainer, WEIGHTS_READY)
#            over the virtual network, the coordinator killed (kill -9) in iteration 1 and
#            restarted with --resume: iterations 0 and 1 once each, policy version 2, the policy
#            servers load the new weights from the head's Redis
#   cut      worker host 2's link is cut mid-round: its leases expire, its jobs re-run on host 1,
#            every group ends with exactly G results; the link heals: the late actor's RESULTs
#            are refused by their fencing epoch and counted; nothing lost or duplicated
#   elastic  2 -> 8 actors mid-round raises the step rate within a few seconds (asserted); then 3
#            of them drain (SIGUSR1: finish, BYE, exit 0), 2 drain on SIGTERM (--drain), 1 leaves
#            at once (SIGTERM: BYE drain=false, its jobs go back at once); no step lost
#   redis    redis-server is killed (kill -9) mid-round and started again on its AOF: the
#            coordinator reconnects and the round completes
#   resume   the coordinator is killed (kill -9) mid-round and started again with --resume: the
#            round continues from Redis and completes
# Timings (step rates, recovery times) are printed; on a loaded machine they are rough.
# Exits 77 with a "SKIP: ..." line when the machine does not allow network namespaces (not root,
# no ip netns); tests/run_integration.sh reports that as skipped, never as passed.
# Set IT_CLUSTER_ONLY=cut,redis,... to run a subset, IT_CLUSTER_KEEP=1 to keep the logs.
set -u
ROOT=$(cd "$(dirname "$0")" && while [ ! -f Makefile ] && [ "$PWD" != / ]; do cd ..; done; pwd)
cd "$ROOT"
S="$ROOT/bin/selroll"
PY=${SELROLL_PYTHON:-/usr/bin/python3}   # the Debian python with python3-zmq and python3-msgpack
P=sr$(($$ % 100000))                     # namespace and interface prefix (interface names <= 15)
HOSTS=(head w1 w2)
declare -A ADDR=([head]=10.77.0.1 [w1]=10.77.0.2 [w2]=10.77.0.3)
HEAD=${ADDR[head]}
REDIS="redis://$HEAD:6379"
fail=0
made=()

skip() { echo "SKIP: it_cluster: $*"; exit 77; }
say() { echo "-- $*"; }
bad() { echo "FAIL $*"; fail=1; }
ok() { echo "ok   $*"; }
only() { [ -z "${IT_CLUSTER_ONLY:-}" ] || [[ ",$IT_CLUSTER_ONLY," == *",$1,"* ]]; }
now() { "$PY" -c 'import time; print("%.3f" % time.monotonic())'; }

[ "$(id -u)" -eq 0 ] || skip "network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN); run as root"
command -v ip >/dev/null 2>&1 || skip "no ip command (Debian package iproute2)"
[ -x "$S" ] || { echo "FAIL it_cluster: $S not built"; exit 1; }
if ! ip netns add "$P-probe" 2>/dev/null; then
  skip "this machine does not allow network namespaces (ip netns add failed)"
fi
ip netns del "$P-probe"

T=$(mktemp -d /tmp/selroll-it-cluster-XXXXXX)
mkdir -p "$T/log" "$T/redis"

# cleanup: every process inside the test's namespaces (ip netns pids), then the namespaces (their
# veth ends and the bridge go with them), then the temp folder. Also on failure and on signals.
cleanup() {
  local ns p
  for ns in "${made[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill "$p" 2>/dev/null; done
  done
  sleep 0.3
  for ns in "${made[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  done
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null; done
  if [ -n "${IT_CLUSTER_KEEP:-}" ]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# --- the virtual network ------------------------------------------------------------------------
netns() {
  ip netns add "$1" || return 1
  made+=("$1")
  ip -n "$1" link set lo up
}
setup_net() {
  netns "$P-sw" || return 1
  ip -n "$P-sw" link add br0 type bridge || return 1
  ip -n "$P-sw" link set br0 up
  local h
  for h in "${HOSTS[@]}"; do
    netns "$P-$h" || return 1
    ip link add "$P-$h-e" type veth peer name "$P-$h-s" || return 1
    ip link set "$P-$h-e" netns "$P-$h" && ip link set "$P-$h-s" netns "$P-sw" || return 1
    ip -n "$P-$h" link set "$P-$h-e" name eth0
    ip -n "$P-$h" addr add "${ADDR[$h]}/24" dev eth0
    ip -n "$P-$h" link set eth0 up
    ip -n "$P-sw" link set "$P-$h-s" master br0
    ip -n "$P-sw" link set "$P-$h-s" up
  done
}
# cut HOST / heal HOST: the switch port of HOST goes down / up (the host's own side stays up, as
# when a cable or a top-of-rack port fails).
cut() { ip -n "$P-sw" link set "$P-$1-s" down; }
heal() { ip -n "$P-sw" link set "$P-$1-s" up; }

setup_net || skip "could not make the virtual network (veth or bridge not allowed here)"

# on HOST NAME CMD...: starts CMD in HOST's namespace in the background, output in log/NAME.log;
# its pid is in PID[NAME].
declare -A PID
on() {
  local h=$1 n=$2; shift 2
  ip netns exec "$P-$h" "$@" >>"$T/log/$n.log" 2>&1 &
  PID[$n]=$!
}
# stop NAME [SIG]: signals NAME and waits for it; its exit code is in RC.
stop() {
  local n=$1 sig=${2:-TERM}
  kill -"$sig" "${PID[$n]}" 2>/dev/null
  wait "${PID[$n]}" 2>/dev/null; RC=$?
}
# wait_exit NAME LIMIT_S: waits for NAME to exit by itself; RC is its exit code (124: timeout, killed).
wait_exit() {
  local n=$1 limit=$2 i
  for ((i = 0; i < limit * 10; i++)); do kill -0 "${PID[$n]}" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "${PID[$n]}" 2>/dev/null; then
    kill -9 "${PID[$n]}" 2>/dev/null; wait "${PID[$n]}" 2>/dev/null; RC=124; return
  fi
  wait "${PID[$n]}" 2>/dev/null; RC=$?
}
wait_log() {   # wait_log NAME PATTERN LIMIT_S
  local i
  for ((i = 0; i < $3 * 20; i++)); do grep -q -- "$2" "$T/log/$1.log" 2>/dev/null && return 0; sleep 0.05; done
  return 1
}
# actions FILE [ACTOR]: ACTIONs recorded on the bus so far (of one actor id).
actions() {
  if [ -n "${2:-}" ]; then grep '"ACTION"' "$1" 2>/dev/null | grep -c "\"actor_id\": \"$2\""
  else grep -c '"ACTION"' "$1" 2>/dev/null; fi
}
wait_actions() {   # wait_actions FILE N LIMIT_S [ACTOR]
  local i n
  for ((i = 0; i < $3 * 20; i++)); do
    n=$(actions "$1" "${4:-}"); [ "${n:-0}" -ge "$2" ] && return 0; sleep 0.05
  done
  return 1
}
rcli() { ip netns exec "$P-head" redis-cli -h "$HEAD" -p 6379 "$@"; }

start_redis() {
  on head redis redis-server --port 6379 --bind "$HEAD" 127.0.0.1 --protected-mode no \
    --dir "$T/redis" --appendonly yes --appendfsync always --save ""
  local i
  for ((i = 0; i < 100; i++)); do rcli ping 2>/dev/null | grep -q PONG && return 0; sleep 0.1; done
  return 1
}

# --- the hosts' long-lived services -------------------------------------------------------------
start_redis || { bad "redis-server did not start in the head namespace"; exit 1; }
ok "virtual network: head ${ADDR[head]}, w1 ${ADDR[w1]}, w2 ${ADDR[w2]} on a bridge; redis-server (AOF) on the head"
for h in w1 w2; do
  on "$h" "env-$h" "$S" env-worker --bind "tcp://${ADDR[$h]}:5560" --capacity 256 \
    --redis "$REDIS" --run train --id "env-$h"
  # 16x the simulated clock: a step's LLM call takes about 100 ms, on timers (no CPU)
  on "$h" "policy-$h" "$S" policy-server --listen "${ADDR[$h]}:8000" --time-scale 16 \
    --redis "$REDIS" --run train --bus "tcp://$HEAD:5557"
done
for h in w1 w2; do
  for _ in $(seq 100); do
    ip netns exec "$P-$h" curl -sf "http://${ADDR[$h]}:8000/health" >/dev/null 2>&1 && break; sleep 0.1
  done
done
# the head reaches both workers' env workers through the bridge (Redis registry written across it)
n=$(rcli --scan --pattern 'selroll:train:envw:*' 2>/dev/null | wc -l)
[ "$n" -eq 2 ] && ok "both env workers registered in the head's Redis over the network" \
  || bad "env-worker registry across hosts: $n entries (want 2)"

# coordinator RUN ARGS...: the coordinator of RUN on the head, its bus hosted on the head's address.
coordinator() {
  local run=$1 name=${COORD_NAME:-coord-$1}; shift
  on head "$name" "$S" coordinator --redis "$REDIS" --run "$run" \
    --work-bind "tcp://$HEAD:5555" --bus-pub-bind "tcp://$HEAD:5556" --bus-sub-bind "tcp://$HEAD:5557" \
    --env-workers "tcp://${ADDR[w1]}:5560,tcp://${ADDR[w2]}:5560" --out "$T/$run" "$@"
}
gate() {
  on head "gate-$1" "$S" gate --coordinator "tcp://$HEAD:5555" --bus-sub "tcp://$HEAD:5557" \
    --bus-pub "tcp://$HEAD:5556" --redis "$REDIS" --run "$1" --id "gate-$1" --mode enforce
}
# actor HOST NAME ARGS...: an actor on HOST using that host's env worker and policy server.
actor() {
  local h=$1 n=$2; shift 2
  on "$h" "$n" "$S" actor --coordinator "tcp://$HEAD:5555" --id "$n" \
    --policy "http://${ADDR[$h]}:8000" --env-workers "tcp://${ADDR[$h]}:5560" "$@"
}
# bus RUN: records the bus of RUN (from the head) to $T/RUN.bus.
bus() {
  on head "bus-$1" "$PY" tests/rollout_bus.py --sub "tcp://$HEAD:5557" --run "$1" --out "$T/$1.bus"
}
check_round() {   # check_round RUN ROUND GROUPS G
  if ip netns exec "$P-head" "$PY" tests/rollout_check.py --redis "$REDIS" --run "$1" --groups "$3" --G "$4" --skip-gate \
      --jsonl "$T/$1/rounds/round-$2.jsonl" >"$T/$1.check" 2>&1; then
    ok "$1: round $2: every one of $3 groups has exactly G=$4 results, no duplicates"
  else
    bad "$1: round $2 results:"; sed 's/^/     /' "$T/$1.check"
  fi
}
# acked_dups RUN ROUND: duplicated (group, traj) among the results stored in Redis for the round.
acked_dups() {
  rcli --no-raw LRANGE "selroll:$1:results:$2" 0 -1 | "$PY" -c '
import ast, re, sys, msgpack
seen = {}
n = 0
for line in sys.stdin:
    m = re.match(r"^\s*(?:\d+\)\s*)?(\".*\")\s*$", line)
    if not m:
        continue
    r = msgpack.unpackb(ast.literal_eval("b" + m.group(1)), raw=False)
    if r.get("status") == "failed":
        continue
    seen.setdefault((r["group"], r["traj"]), set()).add((r["job_id"], r["epoch"]))
    n += 1
print(sum(1 for v in seen.values() if len(v) > 1), n)'
}
coord_stat() {   # coord_stat NAME FIELD: a counter from the coordinator's exit summary line
  sed -n "s/.*coordinator .*: .* \([0-9][0-9]*\) $2.*/\1/p" "$T/log/$1.log" | tail -1
}
cleanup_run() {   # stops whatever of a phase still runs: actors, gate, bus recorder
  local n
  for n in "$@"; do [ -n "${PID[$n]:-}" ] && kill "${PID[$n]}" 2>/dev/null; done
  for n in "$@"; do [ -n "${PID[$n]:-}" ] && wait "${PID[$n]}" 2>/dev/null; done
}

# =================================================================================================
if only train; then
  say "train: two training iterations across hosts (G=4, 2 groups a batch, built-in trainer on the head); the coordinator is killed in iteration 1 and resumed"
  on head trainer "$S" trainer --pull "@tcp://$HEAD:5570" --push ">tcp://$HEAD:5571" --redis "$REDIS" --run train
  gate train
  targs=(--train --iters 2 --batch-groups 2 --group-size 4 --max-steps 20 --eval-tasks 0
         --trainer-push "tcp://$HEAD:5570" --trainer-pull "tcp://$HEAD:5571")
  t0=$(now)
  COORD_NAME=coord-train coordinator train "${targs[@]}"
  for h in w1 w2; do
    actor "$h" "a-train-$h" --slots 8 --record-messages --model 'selroll-policy-v{version}'
  done
  if wait_log coord-train 'iteration 1: wave 0 starts' 90; then
    sleep 1
    stop coord-train KILL
    t1=$(now)
    COORD_NAME=coord-train2 coordinator train "${targs[@]}" --resume
    if wait_log coord-train2 'resuming training at iteration 1' 20; then
      ok "train: coordinator killed in iteration 1 and restarted with --resume: $(grep -h 'resuming training' "$T/log/coord-train2.log" | sed 's/.*resuming/resuming/')"
    else
      bad "train: the restarted coordinator did not resume at iteration 1"; tail -5 "$T/log/coord-train2.log"
    fi
    wait_exit coord-train2 120
  else
    bad "train: iteration 1 never started"; tail -5 "$T/log/coord-train.log"
    stop coord-train KILL
  fi
  t2=$(now)
  [ "$RC" -eq 0 ] && ok "train: the resumed coordinator finished the run (exit 0) $(awk "BEGIN{printf \"%.1f\", $t2-$t1}") s after the restart, $(awk "BEGIN{printf \"%.1f\", $t2-$t0}") s in all" \
    || { bad "train: coordinator exit $RC"; tail -5 "$T/log/coord-train2.log"; }
  its=$(grep -o '"type":"iteration","iteration":[0-9]*' "$T/train/iterations.jsonl" 2>/dev/null | sed 's/.*://' | tr '\n' ' ')
  [ "$its" = "0 1 " ] && ok "train: iterations.jsonl holds iterations 0 and 1, once each" \
    || bad "train: iterations in iterations.jsonl: '$its' (want '0 1 ')"
  v=$(rcli HGET selroll:train:run policy_version 2>/dev/null)
  ti=$(rcli HGET selroll:train:run trained_iteration 2>/dev/null)
  [ "${v:-0}" = 2 ] && [ "${ti:-}" = 1 ] && ok "train: policy version in Redis is 2, the trainer's last iteration 1" \
    || bad "train: policy version in Redis '${v:-}', trained iteration '${ti:-}' (want 2 and 1)"
  for h in w1 w2; do   # POLICY_VERSION over the bus, the weights from the head's Redis
    pv=""
    for _ in $(seq 50); do
      pv=$(ip netns exec "$P-$h" curl -sf "http://${ADDR[$h]}:8000/metrics" | awk '$1 == "selroll_policy_weights_version" {print $2}')
      [ "${pv:-0}" = 2 ] && break; sleep 0.1
    done
    [ "${pv:-0}" = 2 ] && ok "train: the policy server on $h serves version 2 (selroll_policy_weights_version $pv)" \
      || bad "train: the policy server on $h serves version '${pv:-}' (want 2)"
  done
  grep -h 'joined' "$T/log/coord-train.log" | grep -q 'a-train-w1' && grep -h 'joined' "$T/log/coord-train.log" | grep -q 'a-train-w2' \
    && ok "train: actors of both worker hosts joined" || bad "train: not both actors joined"
  cleanup_run a-train-w1 a-train-w2 gate-train trainer
fi

# =================================================================================================
if only cut; then
  say "cut: worker host w2 loses its link mid-round (lease 2000 ms), then heals"
  bus cut
  gate cut
  COORD_NAME=coord-cut coordinator cut --groups 8 --group-size 4 --iters 2 --max-steps 20 \
    --lease-ms 2000 --heartbeat-ms 500
  actor w1 a-cut-w1 --slots 8
  actor w2 a-cut-w2 --slots 8
  if wait_actions "$T/cut.bus" 20 60 a-cut-w2; then
    tc=$(now); cut w2
    ok "cut: w2's link down after $(actions "$T/cut.bus" a-cut-w2) ACTIONs of its actor"
    sleep 5
    heal w2; th=$(now)
    ok "cut: link healed after $(awk "BEGIN{printf \"%.1f\", $th-$tc}") s"
  else
    bad "cut: the actor on w2 never got going"
  fi
  wait_exit coord-cut 120
  [ "$RC" -eq 0 ] || { bad "cut: coordinator exit $RC"; tail -5 "$T/log/coord-cut.log"; }
  check_round cut 0 8 4
  check_round cut 1 8 4
  read -r dups stored < <(acked_dups cut 0)
  [ "${dups:-1}" -eq 0 ] && ok "cut: $stored results stored in Redis for round 0, no trajectory twice" \
    || bad "cut: $dups trajectories stored twice in Redis"
  exp=$(grep -c 'leases expired' "$T/log/coord-cut.log")
  [ "$exp" -ge 1 ] && ok "cut: leases expired on the coordinator: $(grep -h 'leases expired' "$T/log/coord-cut.log" | head -1 | sed 's/.*\] //')" \
    || bad "cut: no lease expired"
  st=$(coord_stat coord-cut stale)
  [ "${st:-0}" -ge 1 ] && ok "cut: $st late RESULTs of the cut actor refused by their fencing epoch and counted" \
    || { bad "cut: stale RESULTs counted: '${st:-}'"; grep -h 'refused\|stale' "$T/log/coord-cut.log" | head -5; }
  w1r=$(grep -c '"ACTION"' "$T/cut.bus")
  ok "cut: $(grep -h 'round 0 done' "$T/log/coord-cut.log" | sed 's/.*round 0 done/round 0 done/')"
  cleanup_run a-cut-w1 a-cut-w2 gate-cut bus-cut
fi

# =================================================================================================
if only elastic; then
  say "elastic: 2 actors x 2 slots, then 8 mid-round, then 6 of them leave"
  bus el
  gate el
  COORD_NAME=coord-el coordinator el --groups 24 --group-size 4 --iters 1 --max-steps 20 \
    --lease-ms 5000 --heartbeat-ms 500
  actor w1 el-1 --slots 2
  actor w2 el-2 --slots 2
  if ! wait_actions "$T/el.bus" 10 60; then bad "elastic: no ACTIONs"; fi
  tb0=$(now); sleep 3; tb1=$(now)
  for i in 3 4 5 6 7 8; do
    h=w1; [ $((i % 2)) -eq 0 ] && h=w2
    if [ $i -le 5 ]; then actor $h el-$i --slots 2 --drain; else actor $h el-$i --slots 2; fi
  done
  ts=$(now); sleep 2; ta0=$(now); sleep 3; ta1=$(now)
  before=$("$PY" tests/py/cluster_rate.py --bus "$T/el.bus" --from "$tb0" --to "$tb1")
  after=$("$PY" tests/py/cluster_rate.py --bus "$T/el.bus" --from "$ta0" --to "$ta1")
  rb=$(sed 's/.*: \([0-9.]*\) steps\/s.*/\1/' <<<"$before"); ra=$(sed 's/.*: \([0-9.]*\) steps\/s.*/\1/' <<<"$after")
  if awk "BEGIN{exit !($ra >= 1.5 * $rb && $rb > 0)}"; then
    ok "elastic: 2 actors: $before; 8 actors (2-5 s after the scale-up): $after"
  else
    bad "elastic: step rate did not rise by 1.5x: before $before; after $after"
  fi
  # distinct ids: under load an actor may say HELLO twice (its HELLO retry) and join twice
  joined=$(grep -o 'actor el-[0-9]* joined' "$T/log/coord-el.log" | sort -u | wc -l)
  [ "$joined" -eq 8 ] && ok "elastic: the coordinator's pool is 8 actors ($joined joined)" || bad "elastic: $joined actors joined (want 8)"
  # leave: el-3 drains on SIGTERM (--drain), el-4 and el-6 on SIGUSR1, el-7 leaves at once
  # (SIGTERM without --drain: BYE drain=false, its jobs go back to the queue at once)
  td=$(now)
  kill -TERM "${PID[el-3]}"; kill -USR1 "${PID[el-4]}"; kill -USR1 "${PID[el-6]}"; kill -TERM "${PID[el-7]}"
  for n in el-3 el-4 el-6; do
    wait_exit "$n" 60
    if [ "$RC" -eq 0 ] && grep -q 'draining' "$T/log/$n.log" && grep -q "actor $n drains" "$T/log/coord-el.log"; then
      ok "elastic: $n drained and exited 0: $(grep -h 'draining (' "$T/log/$n.log" | sed 's/.*actor /actor /'), BYE drain at the coordinator"
    else
      bad "elastic: $n drain: exit $RC"; tail -3 "$T/log/$n.log"
    fi
  done
  wait_exit el-7 10
  # its jobs go back at once: on its BYE drain=false, or on the disconnect that the coordinator
  # sees on the socket when that comes first (either way, not after the lease)
  wait_log coord-el 'actor el-7 left\|actor el-7 is not connected' 10
  line=$(grep -h 'actor el-7 left\|actor el-7 is not connected' "$T/log/coord-el.log" | head -1)
  back=$(sed -n 's/.*: \([0-9]*\) jobs back.*/\1/p' <<<"$line")
  if [ "$RC" -eq 0 ] && { [ "${back:-0}" -ge 1 ] || grep -q 'not connected' <<<"$line"; }; then
    ok "elastic: el-7 left at once (SIGTERM, exit 0): ${line#*coordinator*] }"
  else
    bad "elastic: el-7 did not hand its running jobs back (exit $RC): ${line:-no line}"
    grep -h "el-7" "$T/log/coord-el.log"
  fi
  wait_exit coord-el 120
  [ "$RC" -eq 0 ] || { bad "elastic: coordinator exit $RC"; tail -5 "$T/log/coord-el.log"; }
  check_round el 0 24 4
  # a drained actor's episodes all ended in RESULTs: none of its jobs was re-queued
  for n in el-3 el-4 el-6; do
    lost=$(grep -h "actor $n left" "$T/log/coord-el.log" | sed -n 's/.*: \([0-9]*\) jobs back.*/\1/p')
    [ "${lost:-0}" -eq 0 ] && ok "elastic: $n handed back 0 jobs (its episodes finished)" || bad "elastic: $n left $lost jobs"
  done
  cleanup_run el-1 el-2 el-5 el-8 gate-el bus-el
fi

# =================================================================================================
if only redis || only resume; then
  say "redis + resume: kill -9 of redis-server mid-round (restarted on its AOF), then of the coordinator (--resume)"
  bus rr
  gate rr
  COORD_NAME=coord-rr coordinator rr --groups 8 --group-size 4 --iters 2 --max-steps 20 \
    --lease-ms 3000 --heartbeat-ms 500
  actor w1 rr-1 --slots 8
  actor w2 rr-2 --slots 8
  if only redis; then
    if wait_actions "$T/rr.bus" 40 60; then
      n0=$(rcli LLEN selroll:rr:results:0)
      stop redis KILL; sleep 1
      t0=$(now)
      start_redis || bad "redis: redis-server did not come back"
      t1=$(now)
      n1=$(rcli LLEN selroll:rr:results:0)
      ok "redis: killed after $(actions "$T/rr.bus") ACTIONs, back on its AOF in $(awk "BEGIN{printf \"%.2f\", $t1-$t0}") s"
      [ "${n1:-0}" -ge "${n0:-1}" ] && ok "redis: the $n0 results stored before the kill are all back from the AOF ($n1)" \
        || bad "redis: results before the kill $n0, after the restart ${n1:-none}"
      for _ in $(seq 400); do [ "$(rcli LLEN selroll:rr:results:0)" -gt "${n1:-0}" ] && break; sleep 0.05; done
      t2=$(now)
      [ "$(rcli LLEN selroll:rr:results:0)" -gt "${n1:-0}" ] \
        && ok "redis: the coordinator stored its next RESULT $(awk "BEGIN{printf \"%.2f\", $t2-$t1}") s after Redis was back" \
        || bad "redis: no RESULT stored within 20 s of Redis coming back"
    else
      bad "redis: no ACTIONs before the restart"
    fi
  fi
  if only resume; then
    if wait_log coord-rr 'round 0 done' 90 && wait_actions "$T/rr.bus" "$(($(actions "$T/rr.bus") + 40))" 60; then
      stop coord-rr KILL
      t0=$(now)
      COORD_NAME=coord-rr2 coordinator rr --groups 8 --group-size 4 --iters 2 --max-steps 20 \
        --lease-ms 3000 --heartbeat-ms 500 --resume
      n1=$(rcli LLEN selroll:rr:results:1)
      wait_log coord-rr2 'resuming run' 20 && t1=$(now) \
        && ok "resume: coordinator killed in round 1, restarted with --resume: $(grep -h 'resuming run' "$T/log/coord-rr2.log" | sed 's/.*resuming/resuming/') ($(awk "BEGIN{printf \"%.2f\", $t1-$t0}") s)" \
        || bad "resume: the new coordinator did not resume"
      for _ in $(seq 400); do [ "$(rcli LLEN selroll:rr:results:1)" -gt "${n1:-0}" ] && break; sleep 0.05; done
      t2=$(now)
      ok "resume: the first RESULT stored $(awk "BEGIN{printf \"%.2f\", $t2-$t0}") s after the restart ($n1 before it)"
      wait_exit coord-rr2 120
      [ "$RC" -eq 0 ] || { bad "resume: coordinator exit $RC"; tail -5 "$T/log/coord-rr2.log"; }
    else
      bad "resume: round 0 did not finish"
    fi
  else
    wait_exit coord-rr 120
    [ "$RC" -eq 0 ] || { bad "redis: coordinator exit $RC"; tail -5 "$T/log/coord-rr.log"; }
  fi
  check_round rr 0 8 4
  only resume && check_round rr 1 8 4
  if only redis; then
    n=$(grep -ci 'redis' "$T/log/coord-rr.log")
    say "redis: the coordinator's Redis lines: $(grep -hi 'redis' "$T/log/coord-rr.log" | head -3 | sed 's/.*\] //' | tr '\n' '|')"
  fi
  cleanup_run rr-1 rr-2 gate-rr bus-rr
fi

[ $fail -eq 0 ] && echo "it_cluster: all checks passed" || echo "it_cluster: FAILED"
exit $fail
