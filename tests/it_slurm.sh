#!/usr/bin/env bash
# it_slurm.sh: the repository's deploy/slurm/selroll.sbatch run by a real Slurm cluster of test
# hosts. The test makes Linux network namespaces joined by a bridge (as tests/it_cluster.sh does):
# a controller host ctl 10.78.0.10 (slurmctld) and five compute hosts n1..n5 10.78.0.11-15 (one
# slurmd each). Every host also has its own UTS and mount namespace, so `hostname` is the node
# name and /etc/hosts (bind-mounted from the temp folder) resolves every host name. One munged (in
# the root namespace, key made by the test) serves all of them through a socket in the temp folder:
# a Unix socket is reached by its path, whatever the network namespace. The configuration
# (slurm.conf) is written by the test: SlurmUser=root, proctrack/linuxproc, task/none, no cgroups,
# no accounting storage, the state and spool folders in the temp folder. Ports inside the test's
# own namespaces are the defaults (6817/6818, selroll's 5555...): nothing else listens there.
# Checks:
#   up       sinfo shows the five nodes idle (bounded wait; the daemons' logs printed on failure)
#   train    sbatch --nodes=3 deploy/slurm/selroll.sbatch, a training run with the built-in policy
#            (TRAIN=1): n1 is node 0 (redis, gate, trainer, coordinator), n2 and n3 the workers;
#            the job ends COMPLETED (scontrol show job, kept MinJobAge=600 s; no slurmdbd, so no
#            sacct) with exit code 0:0; the results are in $OUT as the script says
#            (iterations.jsonl with every iteration once), the logs in $OUT/logs/<node>-<role>.log,
#            every worker node's actors joined, every group of every round has exactly G results
#   rollout  the same with rollout rounds (TRAIN=0: a steady demand of jobs), and while it runs:
#   elastic  a second sbatch --nodes=2 in the script's actors-only mode (MODE=actors) on n4 and n5
#            joins the running campaign: the coordinator's step rate rises
#            (selroll_coordinator_actions_total on its /metrics, before and after); `scancel
#            --signal=USR1` of that job drains its actors (they finish their running episodes,
#            BYE, no job back, the job ends COMPLETED)
#   down     worker node n3 is lost (every process of the host killed, then `scontrol update
#            state=down`): the job stays RUNNING (--no-kill), n3's leases expire and its jobs re-run
#   scancel  a third such job ended by plain scancel: its actors BYE (drain), the episodes their
#            node's env worker and policy server no longer serve run again
#            and the campaign ends COMPLETED with exactly G results for every group
# Exits 77 with a "SKIP: ..." line when the machine does not allow network namespaces or the Slurm
# packages (slurm-wlm, munge; scripts/deps.sh --test installs them) are missing.
# IT_SLURM_KEEP=1 keeps the temp folder.
set -u
ROOT=$(cd "$(dirname "$0")" && while [ ! -f Makefile ] && [ "$PWD" != / ]; do cd ..; done; pwd)
cd "$ROOT"
S="$ROOT/bin/selroll"
PY=${SELROLL_PYTHON:-/usr/bin/python3}
P=sl$(($$ % 100000))                     # namespace and interface prefix (interface names <= 15)
HOSTS=(ctl n1 n2 n3 n4 n5)
declare -A ADDR=([ctl]=10.78.0.10 [n1]=10.78.0.11 [n2]=10.78.0.12 [n3]=10.78.0.13 [n4]=10.78.0.14
                 [n5]=10.78.0.15)
fail=0
made=()

skip() { echo "SKIP: it_slurm: $*"; exit 77; }
say() { echo "-- $*"; }
bad() { echo "FAIL $*"; fail=1; }
ok() { echo "ok   $*"; }
now() { "$PY" -c 'import time; print("%.3f" % time.monotonic())'; }

[ "$(id -u)" -eq 0 ] || skip "network namespaces and Slurm's daemons need root; run as root"
command -v ip >/dev/null 2>&1 || skip "no ip command (Debian package iproute2)"
command -v unshare >/dev/null 2>&1 || skip "no unshare command (Debian package util-linux)"
PATH=$PATH:/usr/sbin
for c in slurmctld slurmd slurmstepd sbatch sinfo scontrol scancel munged; do
  command -v "$c" >/dev/null 2>&1 ||
    skip "no $c (Debian packages slurm-wlm and munge; scripts/deps.sh --test installs them)"
done
[ -x "$S" ] || { echo "FAIL it_slurm: $S not built"; exit 1; }
if ! ip netns add "$P-probe" 2>/dev/null; then
  skip "this machine does not allow network namespaces (ip netns add failed)"
fi
ip netns del "$P-probe"
unshare --uts --mount true 2>/dev/null || skip "this machine does not allow UTS and mount namespaces (unshare failed)"

T=$(mktemp -d /tmp/selroll-it-slurm-XXXXXX)
chmod 0755 "$T"
mkdir -p "$T/munge" "$T/slurm/state" "$T/slurm/spool" "$T/slurm/log" "$T/log"
chmod 0700 "$T/munge"
MUNGE_PID=""

# cleanup: every process in the test's namespaces (slurmd, slurmstepd and the jobs' processes are
# all there), munged, the namespaces, the temp folder. Also on failure and on signals.
cleanup() {
  local ns p
  for ns in "${made[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill "$p" 2>/dev/null; done
  done
  sleep 0.5
  for ns in "${made[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  done
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null; done
  if [ -n "$MUNGE_PID" ]; then kill "$MUNGE_PID" 2>/dev/null; wait "$MUNGE_PID" 2>/dev/null; fi
  if [ -n "${IT_SLURM_KEEP:-}" ]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# --- the virtual network and the hosts ----------------------------------------------------------
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
setup_net || skip "could not make the virtual network (veth or bridge not allowed here)"

{ echo "127.0.0.1 localhost"; for h in "${HOSTS[@]}"; do echo "${ADDR[$h]} $h"; done; } >"$T/hosts"
# $T/host HOST CMD...: runs CMD as a process of HOST: its network namespace, its own host name, the
# test's /etc/hosts.
cat >"$T/host" <<EOF
#!/bin/bash
h=\$1; shift
exec ip netns exec "$P-\$h" unshare --uts --mount --propagation private /bin/bash -c \\
  'hostname "\$0" && mount --bind "$T/hosts" /etc/hosts && exec "\$@"' "\$h" "\$@"
EOF
chmod +x "$T/host"
declare -A PID
on() {   # on HOST NAME CMD...: CMD on HOST in the background, output in log/NAME.log, pid in PID[NAME]
  local h=$1 n=$2; shift 2
  "$T/host" "$h" "$@" >>"$T/log/$n.log" 2>&1 &
  PID[$n]=$!
  disown "$!"   # killed by the test (a lost node) or by cleanup: no job notice from bash
}
at() { local h=$1; shift; "$T/host" "$h" "$@"; }   # at HOST CMD...: CMD on HOST, in the foreground
[ "$(at n1 hostname)" = n1 ] && at n1 getent hosts n2 >/dev/null ||
  skip "could not give a test host its own host name and /etc/hosts (unshare --uts --mount)"

# --- munge --------------------------------------------------------------------------------------
dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$T/munge/munge.key"
MSOCK="$T/munge/munge.socket"
munged -F -f --key-file="$T/munge/munge.key" --socket="$MSOCK" --pid-file="$T/munge/munged.pid" \
  --seed-file="$T/munge/munged.seed" --log-file="$T/munge/munged.log" >"$T/log/munged.log" 2>&1 &
MUNGE_PID=$!
for _ in $(seq 100); do [ -S "$MSOCK" ] && break; sleep 0.1; done
[ -S "$MSOCK" ] || { echo "FAIL it_slurm: munged did not start:"; cat "$T/log/munged.log" "$T/munge/munged.log" 2>/dev/null; exit 1; }

# --- slurm.conf ---------------------------------------------------------------------------------
export SLURM_CONF="$T/slurm/slurm.conf"
{
  cat <<EOF
ClusterName=selrolltest
SlurmctldHost=ctl(${ADDR[ctl]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MSOCK
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$T/slurm/state
SlurmdSpoolDir=$T/slurm/spool/%n
SlurmctldPidFile=$T/slurm/slurmctld.pid
SlurmdPidFile=$T/slurm/slurmd-%n.pid
SlurmctldLogFile=$T/slurm/log/slurmctld.log
SlurmdLogFile=$T/slurm/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/linear
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
KillWait=30
SlurmdTimeout=30
InactiveLimit=0
EOF
  for h in n1 n2 n3 n4 n5; do echo "NodeName=$h NodeAddr=${ADDR[$h]} CPUs=1 RealMemory=100 State=UNKNOWN"; done
  echo "PartitionName=test Nodes=n[1-5] Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE"
} >"$SLURM_CONF"
# slurmd loads a cgroup plugin whatever the proctrack and task plugins are; cgroup/v1 named here
# skips the detection, which fails in a namespace whose /sys has no cgroup mounts (nothing else of
# cgroups is used: proctrack/linuxproc, task/none)
printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' >"$T/slurm/cgroup.conf"

daemon_logs() {
  local f
  for f in "$T/slurm/log/"*.log "$T/log/"slurm*.log; do
    [ -f "$f" ] || continue
    echo "   --- $f"; tail -n 15 "$f" | sed 's/^/     /'
  done
}

# --- the daemons --------------------------------------------------------------------------------
on ctl slurmctld slurmctld -D -i -f "$SLURM_CONF"
for h in n1 n2 n3 n4 n5; do
  mkdir -p "$T/slurm/spool/$h"
  on "$h" "slurmd-$h" slurmd -D -N "$h" -f "$SLURM_CONF"
done
t0=$(now)
idle=0
for _ in $(seq 300); do
  idle=$(at ctl sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
  [ "$idle" -eq 5 ] && break
  sleep 0.2
done
if [ "$idle" -eq 5 ]; then
  ok "up: slurmctld on ctl, slurmd on n1..n5: sinfo shows 5 nodes idle after $(awk "BEGIN{printf \"%.1f\", $(now)-$t0}") s"
else
  bad "up: sinfo shows $idle nodes idle after 60 s (want 5):"
  at ctl sinfo -N 2>&1 | sed 's/^/     /'
  daemon_logs
  exit 1
fi

# job_field JOBID FIELD: one field of `scontrol show job` (the job is kept MinJobAge after its end)
job_field() { at ctl scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }
wait_state() {   # wait_state JOBID STATE LIMIT_S
  local i
  for ((i = 0; i < $3 * 5; i++)); do [ "$(job_field "$1" JobState)" = "$2" ] && return 0; sleep 0.2; done
  return 1
}
wait_end() {   # wait_end JOBID LIMIT_S: until the job has ended (any state but PENDING, RUNNING, COMPLETING)
  local i st
  for ((i = 0; i < $2 * 5; i++)); do
    st=$(job_field "$1" JobState)
    case "$st" in PENDING|RUNNING|COMPLETING|CONFIGURING|"") sleep 0.2 ;; *) return 0 ;; esac
  done
  return 1
}
metric() {   # metric NAME: a value of the coordinator's /metrics (node 0 of the main job, n1:8600)
  at ctl curl -sf --max-time 2 "http://n1:8600/metrics" 2>/dev/null | awk -v m="$1" '$1 == m {print $2}'
}

# campaign KIND: one sbatch --nodes=3 of the script on n1..n3 and its checks. KIND train: a
# training run (TRAIN=1); KIND rollout: rollout rounds (TRAIN=0, a steady demand of jobs), with
# the elastic jobs on n4 and n5 and the loss of n3 while it runs.
campaign() {
KIND=$1
# --- the main job -------------------------------------------------------------------------------
RUN=slurm-$KIND
OUT="$T/out/$RUN"
G=4
ITERS=2
if [ "$KIND" = train ]; then
  TR=1
  say "main: sbatch --nodes=3 deploy/slurm/selroll.sbatch, TRAIN=1: $ITERS iterations, G=$G, 4 groups a batch"
  main_exp="ALL,SELROLL=$S,RUN=$RUN,OUT=$OUT,TRAIN=1,ITERS=$ITERS,BATCH_GROUPS=4,GROUP_SIZE=$G"
else
  TR=0
  say "main: sbatch --nodes=3 deploy/slurm/selroll.sbatch, TRAIN=0: $ITERS rounds of 20 groups, G=$G"
  main_exp="ALL,SELROLL=$S,RUN=$RUN,OUT=$OUT,TRAIN=0,ITERS=$ITERS,ROUND_GROUPS=20,GROUP_SIZE=$G"
fi
main_exp+=",ACTORS_PER_NODE=2,SLOTS=2,LEASE_MS=3000,COORDINATOR_ARGS=--max-steps 20 --eval-tasks 0 --heartbeat-ms 500"
jm=$(at ctl sbatch --parsable --nodes=3 --chdir="$T" --export="$main_exp" "$ROOT/deploy/slurm/selroll.sbatch" 2>"$T/log/sbatch-main.err")
if [ -z "$jm" ]; then
  bad "main: sbatch refused the job: $(cat "$T/log/sbatch-main.err")"; daemon_logs; exit 1
fi
if wait_state "$jm" RUNNING 30; then
  ok "main: job $jm running on $(job_field "$jm" NodeList) (batch host $(job_field "$jm" BatchHost))"
else
  bad "main: job $jm not running after 30 s: $(job_field "$jm" JobState) $(job_field "$jm" Reason)"; daemon_logs; exit 1
fi

CLOG="$OUT/logs/n1-coordinator.log"
wait_clog() {   # wait_clog PATTERN LIMIT_S: until the coordinator's log has PATTERN
  local i
  for ((i = 0; i < $2 * 10; i++)); do grep -q -- "$1" "$CLOG" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
rate() {   # rate SECONDS: steps (ACTIONs) per second at the coordinator over the next SECONDS
  local a0 a1 t0 t1
  a0=$(metric selroll_coordinator_actions_total); t0=$(now)
  sleep "$1"
  a1=$(metric selroll_coordinator_actions_total); t1=$(now)
  awk "BEGIN{printf \"%.1f\", (${a1:-0} - ${a0:-0}) / ($t1 - $t0)}"
}
joined=0
for a in n2-1 n2-2 n3-1 n3-2; do wait_clog "actor $a joined" 30 && joined=$((joined + 1)); done
[ "$joined" -eq 4 ] && ok "main: the 4 actors of worker nodes n2 and n3 joined the coordinator on n1" \
  || bad "main: $joined of the 4 actors of n2 and n3 joined"
if [ "$KIND" = rollout ]; then
# --- elastic: actors-only jobs join the campaign, then leave by scancel -------------------------
for _ in $(seq 300); do [ "$(metric selroll_coordinator_actions_total)" -ge 40 ] 2>/dev/null && break; sleep 0.1; done
rb=$(rate 4)
say "elastic: sbatch --nodes=2 MODE=actors (2 actors x 2 slots on n4 and n5) into run $RUN at n1"
el_exp="ALL,SELROLL=$S,MODE=actors,RUN=$RUN,HEAD_ADDR=n1,OUT=$OUT,TRAIN=$TR,ACTORS_PER_NODE=2,SLOTS=2"
je=$(at ctl sbatch --parsable --nodes=2 --nodelist=n4,n5 --chdir="$T" --export="$el_exp" "$ROOT/deploy/slurm/selroll.sbatch" 2>"$T/log/sbatch-el.err")
[ -n "$je" ] || bad "elastic: sbatch refused the job: $(cat "$T/log/sbatch-el.err")"
wait_state "$je" RUNNING 30 && ok "elastic: job $je running on $(job_field "$je" NodeList)" \
  || bad "elastic: job $je not running: $(job_field "$je" JobState) $(job_field "$je" Reason)"
joined=0
for a in n4-1 n4-2 n5-1 n5-2; do wait_clog "actor $a joined" 20 && joined=$((joined + 1)); done
[ "$joined" -eq 4 ] && ok "elastic: the 4 actors of n4 and n5 joined the running campaign" \
  || bad "elastic: $joined of the 4 actors of n4 and n5 joined"
sleep 1
ra=$(rate 4)
if awk "BEGIN{exit !($ra >= 1.3 * $rb && $rb > 0)}"; then
  ok "elastic: step rate $rb steps/s with 4 actors, $ra steps/s with 8 ($(awk "BEGIN{printf \"%.2f\", $ra/$rb}")x)"
else
  bad "elastic: the step rate did not rise by 1.3x: $rb steps/s before, $ra after"
fi
at ctl scancel --signal=USR1 "$je"
wait_end "$je" 60
st=$(job_field "$je" JobState)
[ "$st" = COMPLETED ] && ok "elastic: scancel --signal=USR1 $je: the job ended COMPLETED, exit code $(job_field "$je" ExitCode)" \
  || bad "elastic: after scancel --signal=USR1, job $je is $st (want COMPLETED)"
for a in n4-1 n4-2 n5-1 n5-2; do
  if grep -q "actor $a drains" "$CLOG" && grep -q "actor $a left (drained): 0 jobs back" "$CLOG"; then
    ok "elastic: $a: $(grep -h 'draining (' "$OUT/logs/${a%-*}-actor-${a##*-}.log" | sed 's/.*: draining/draining/'), BYE drain at the coordinator, $(grep -h "actor $a left" "$CLOG" | sed 's/.*left/left/')"
  else
    bad "elastic: $a did not drain: $(grep -h "actor $a" "$CLOG" | tail -2 | sed 's/.*coordinator\[[0-9]*\] //' | tr '\n' '|')"
  fi
done
nf=$(grep -h 'failed (attempt' "$CLOG" | wc -l)
[ "$nf" -eq 0 ] && ok "elastic: no episode failed: the env workers and policy servers of n4 and n5 served them to their end" \
  || bad "elastic: $nf episodes failed at the coordinator: $(grep -h 'failed (attempt' "$CLOG" | head -2 | sed 's/.*coordinator\[[0-9]*\] //')"

# --- down: worker node n3 of the main job is lost -----------------------------------------------
say "down: every process of n3 killed (-9), then scontrol update nodename=n3 state=down"
nexp0=$(grep -c 'leases expired\|actor n3-[12] is not connected\|actor n3-[12] left' "$CLOG")
for p in $(ip netns pids "$P-n3"); do kill -9 "$p" 2>/dev/null; done
at ctl scontrol update nodename=n3 state=down reason=it_slurm
sleep 1
st=$(job_field "$jm" JobState)
[ "$st" = RUNNING ] || bad "down: job $jm is $st after n3 went down (want RUNNING: the script's --no-kill)"
ok "down: n3 is $(at ctl sinfo -h -N -n n3 -o '%T' | head -1), job $jm is $(job_field "$jm" JobState)"

# plain scancel: SIGTERM to every process of the job: the actors drain, their node's env worker
# and policy server stop at once, so the episodes still running fail and run again elsewhere
say "elastic: a third job (MODE=actors on n4 and n5), ended by plain scancel"
je2=$(at ctl sbatch --parsable --nodes=2 --nodelist=n4,n5 --chdir="$T" --export="$el_exp" "$ROOT/deploy/slurm/selroll.sbatch" 2>"$T/log/sbatch-el2.err")
[ -n "$je2" ] || bad "elastic: sbatch refused the job: $(cat "$T/log/sbatch-el2.err")"
wait_state "$je2" RUNNING 30 || bad "elastic: job $je2 not running: $(job_field "$je2" JobState) $(job_field "$je2" Reason)"
joined=0
for a in n4-1 n4-2 n5-1 n5-2; do
  for _ in $(seq 200); do [ "$(grep -c "actor $a joined" "$CLOG")" -ge 2 ] && break; sleep 0.1; done
  [ "$(grep -c "actor $a joined" "$CLOG")" -ge 2 ] && joined=$((joined + 1))
done
[ "$joined" -eq 4 ] || bad "elastic: $joined of the 4 actors of job $je2 joined"
sleep 1
nd0=$(grep -c 'drains (drain)' "$CLOG")
at ctl scancel "$je2"
wait_end "$je2" 60
st=$(job_field "$je2" JobState)
nd=$(($(grep -c 'drains (drain)' "$CLOG") - nd0))
[ "$st" = CANCELLED ] && [ "$nd" -eq 4 ] \
  && ok "elastic: scancel $je2: job CANCELLED, its 4 actors said BYE (drain); $(grep -c 'failed (attempt' "$CLOG") episodes failed with their node's env worker or policy server and were queued again" \
  || bad "elastic: scancel $je2: job $st, $nd of its 4 actors drained"

fi

wait_end "$jm" 150
[ "$KIND" = rollout ] && {
lines=$(grep -h 'leases expired\|actor n3-[12] is not connected\|actor n3-[12] left' "$CLOG" | tail -n +$((nexp0 + 1)) | grep -v 'coordinator finished' |
        sed 's/.*coordinator\[[0-9]*\] //' | tr '\n' '|')
[ -n "$lines" ] && ok "down: the coordinator took n3's jobs back: ${lines%|}" \
  || bad "down: no lease expired and no actor of n3 left at the coordinator after n3 went down"
}
if [ "$(job_field "$jm" JobState)" = COMPLETED ]; then
  ok "main: job $jm COMPLETED, exit code $(job_field "$jm" ExitCode)"
else
  bad "main: job $jm: state $(job_field "$jm" JobState), exit code $(job_field "$jm" ExitCode) (want COMPLETED)"
  tail -n 20 "$T/selroll-$jm.out" 2>/dev/null | sed 's/^/     /'
  for f in "$OUT/logs/"*; do echo "   --- $f"; tail -n 5 "$f" | sed 's/^/     /'; done
  daemon_logs
fi
[ "$(job_field "$jm" ExitCode)" = "0:0" ] || bad "main: exit code $(job_field "$jm" ExitCode) (want 0:0)"

if [ "$KIND" = train ]; then
its=$(grep -o '"type":"iteration","iteration":[0-9]*' "$OUT/iterations.jsonl" 2>/dev/null | sed 's/.*://' | tr '\n' ' ')
want=$(seq 0 $((ITERS - 1)) | tr '\n' ' ')
[ "$its" = "$want" ] && ok "main: $OUT/iterations.jsonl holds iterations $its once each" \
  || bad "main: iterations in $OUT/iterations.jsonl: '$its' (want '$want')"
fi
grep -q "run $RUN finished (coordinator exit 0)" "$T/selroll-$jm.out" 2>/dev/null \
  && ok "main: selroll-$jm.out: $(grep -h 'finished' "$T/selroll-$jm.out")" \
  || { bad "main: selroll-$jm.out does not say the run finished:"; sed 's/^/     /' "$T/selroll-$jm.out" 2>/dev/null | tail -5; }
[ "$KIND" = train ] && [ ! -s "$OUT/logs/n1-trainer.log" ] && bad "main: no log $OUT/logs/n1-trainer.log"
for f in n1-redis n1-gate n1-coordinator n2-env-worker n2-policy-server n2-actor-1 n2-actor-2 \
         n3-env-worker n3-policy-server n3-actor-1 n3-actor-2; do
  [ -s "$OUT/logs/$f.log" ] || bad "main: no log $OUT/logs/$f.log"
done
ok "main: logs in $OUT/logs: $(cd "$OUT/logs" 2>/dev/null && ls | tr '\n' ' ')"
for a in n2-1 n2-2 n3-1 n3-2; do
  grep -q "actor $a joined" "$OUT/logs/n1-coordinator.log" || bad "main: actor $a never joined the coordinator"
done
# every trajectory of the run has its result: in each round (a wave of an iteration) file, every
# group the coordinator started (its log: "round R: groups N (...)") has exactly G final results,
# one per trajectory, none twice (a failed attempt is not final: its job ran again)
if "$PY" - "$OUT" "$CLOG" "$G" >"$T/log/rounds.check" 2>&1 <<'PYEOF'
import glob, json, re, sys
out, clog, G = sys.argv[1], sys.argv[2], int(sys.argv[3])
want = {}
for line in open(clog):
    m = re.search(r"\] round (\d+): groups (\d+) \(", line)
    if m:
        want[int(m.group(1))] = int(m.group(2))
bad, n = [], 0
for r, ng in sorted(want.items()):
    finals = {}
    for line in open("%s/rounds/round-%d.jsonl" % (out, r)):
        x = json.loads(line)
        if x["status"] != "failed":
            finals.setdefault(x["group"], []).append(x["traj"])
    n += sum(len(t) for t in finals.values())
    if len(finals) != ng:
        bad.append("round %d: %d groups with results (want %d)" % (r, len(finals), ng))
    bad += ["round %d: group %s results for trajectories %s" % (r, g, sorted(t))
            for g, t in finals.items() if sorted(t) != list(range(G))]
print("%d rounds, %d results" % (len(want), n) if not bad else "\n".join(bad))
sys.exit(1 if bad or not want else 0)
PYEOF
then
  ok "main: every group of every round has exactly G=$G results, none twice ($(cat "$T/log/rounds.check"))"
else
  bad "main: round results:"; sed 's/^/     /' "$T/log/rounds.check" | head -10
fi

}

export SELROLL_TIME_SCALE=16   # the built-in policy servers: a policy call of about 100 ms, on timers
campaign train
campaign rollout

[ $fail -eq 0 ] && echo "it_slurm: all checks passed" || echo "it_slurm: FAILED"
exit $fail
