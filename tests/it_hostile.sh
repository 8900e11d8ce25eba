#!/usr/bin/env bash
# it_hostile.sh: hostile input during a running round (docs/security.md). `selroll run` (1 env
# worker, the policy server, the coordinator, the gate, 2 actors) plus a standalone `selroll
# trainer`; while the round runs, tests/py/hostile.py sends HOSTILE_N (10,000) random and mutated
# messages to each socket at once: the coordinator's work ROUTER, the bus (XSUB side), the env
# worker's ROUTER, the trainer's PULL, the policy server's HTTP port and the coordinator's
# dashboard HTTP (--http; raw requests mutated from the fuzz_dashboard_http corpus). Checks: no
# process crashes, the round completes with every group finished, the dashboard still answers
# /health 200 after the attack, the roles' error counters grew (scraped from /metrics during the
# run: coordinator --http, gate and env worker --metrics-port on free ports, the actors'
# --metrics-port on a free port each, found in /proc; the trainer, which serves no /metrics, from
# its final counter line), and the work channel ignored the peer that kept sending garbage.
# Before that, tests/py/hostile_bounds.py's bounded-resource attacks (docs/security.md): a 1 MiB
# subscription, 5,000 subscriptions, forged CANCELs, 1,000 RESETs from one client, 200 idle HTTP
# connections; the coordinator and an actor stay within 32 MiB of their memory, /health answers.
# The run's channels are on loopback TCP (--sockets tcp), the surfaces a peer on the network sees.
# Budget: 75 s.
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
# scrape URL NAME: the sum of every series of the metric family NAME at URL/metrics ("" if none).
scrape() {
  curl -sf --max-time 3 "$1/metrics" 2>/dev/null | awk -v n="$2" \
    '$1 == n || index($1, n "{") == 1 { s += $NF; f = 1 } END { if (f) printf "%d\n", s }'
}
# actor_port NAME: the port the actor --id NAME listens on (its --metrics-port 127.0.0.1:0).
actor_port() {
  "$PY" - "$1" <<'PYEOF'
import os, sys
want = ["actor", "--id", sys.argv[1]]
listen = {}
for line in open("/proc/net/tcp").read().splitlines()[1:]:
    f = line.split()
    if f[3] == "0A":
        listen[f[9]] = int(f[1].split(":")[1], 16)
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv = open("/proc/%s/cmdline" % pid, "rb").read().decode(errors="replace").split("\0")
        if not all(w in argv for w in want) or argv[argv.index("--id") + 1] != sys.argv[1]:
            continue
        for fd in os.listdir("/proc/%s/fd" % pid):
            link = os.readlink("/proc/%s/fd/%s" % (pid, fd))
            if link.startswith("socket:[") and link[8:-1] in listen:
                print(listen[link[8:-1]]); sys.exit(0)
    except OSError:
        pass
PYEOF
}
t0=$(date +%s)

CP=$(free_port); GP=$(free_port); EP=$(free_port)
printf '[env-worker]\nmetrics-port = %s\n' "$EP" >"$T/roles.ini"
SELROLL_CONFIG="$T/roles.ini" "$S" run --out "$T/r" --run hostile --sockets tcp --actors 2 --slots 8 --env-workers 1 \
  --groups 6 --group-size 4 --iters 1 --max-steps 25 --time-scale 4 --lease-ms 3000 --grace-ms 2000 \
  --coordinator-args "--http 127.0.0.1:$CP" --gate-args "--metrics-port $GP" \
  --actor-args "--metrics-port 127.0.0.1:0" >"$T/run.out" 2>"$T/run.err" &
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

DASH="http://127.0.0.1:$CP"
GATE_M="http://127.0.0.1:$GP"
ENV_M="http://127.0.0.1:$EP"
AP=$(actor_port actor-1)
ACTOR_M="http://127.0.0.1:${AP:-1}"
[ -n "$AP" ] || bad "actor-1 serves no --metrics-port"
# The counters before the attack (0 when a family has no series yet).
c0=$(scrape "$DASH" selroll_coord_bad_messages_total); g0=$(scrape "$GATE_M" selroll_gate_bad_messages_total)
e0=$(scrape "$ENV_M" selroll_envw_errors_total); a0=$(scrape "$ACTOR_M" selroll_actor_bad_bus_total)
say "before: coordinator ${c0:-?}, gate ${g0:-?}, env worker ${e0:-?}, actor-1 bus ${a0:-?} (from /metrics)"
[ -n "$c0" ] && [ -n "$g0" ] && [ -n "$e0" ] && [ -n "$a0" ] || bad "a role's /metrics did not answer before the attack"

# Bounded against hostile peers (tests/py/hostile_bounds.py): a 1 MiB subscription, 5,000
# subscriptions, forged CANCELs for every group, 1,000 RESETs from one unknown client, 200 idle
# connections to the dashboard and to the policy server with /health asked meanwhile. Memory
# bound: the coordinator's and actor-1's VmRSS grow by less than 32 MiB each.
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null; }
pid_of() { awk -v n="$1" '$1 ~ "^"n {print $2; exit}' "$T/r/children.txt"; }
CPID=$(pid_of coordinator); APID=$(pid_of actor-1)
rc0=$(rss "$CPID"); ra0=$(rss "$APID")
"$PY" tests/py/hostile_bounds.py --bus-sub "$BUS_SUB_EP" --bus-pub "$BUS_PUB_EP" --run hostile \
  --groups 6 --env "$ENV_WORKERS" --http "$DASH,$POLICY_URL" >"$T/bounds.out" 2>&1 \
  || bad "hostile_bounds.py: $(tail -n 3 "$T/bounds.out")"
sed 's/^/   /' "$T/bounds.out"
rc1=$(rss "$CPID"); ra1=$(rss "$APID")
say "VmRSS: coordinator ${rc0:-?} -> ${rc1:-?} kB, actor-1 ${ra0:-?} -> ${ra1:-?} kB"
[ -n "$rc1" ] && [ $((rc1 - rc0)) -lt 32768 ] || bad "the coordinator grew by more than 32 MiB (or is gone)"
[ -n "$ra1" ] && [ $((ra1 - ra0)) -lt 32768 ] || bad "actor-1 grew by more than 32 MiB (or is gone)"
sleep 1.2 # the coordinator's tick copies the proxy's counters into /metrics
v=$(scrape "$DASH" selroll_bus_subscriptions_refused_total)
[ "${v:-0}" -gt 0 ] && say "bus proxy refused $v subscriptions" || bad "the bus proxy refused no subscription"
v=$(scrape "$DASH" selroll_coord_cancels_refused_total)
[ "${v:-0}" -gt 0 ] && say "coordinator ignored $v forged cancels" || bad "the coordinator ignored no forged CANCEL"

# sample: the counters now; a value is kept only when its endpoint answered, so the last
# answered scrape survives the roles' exit at the end of the round.
sample() {
  local v
  v=$(scrape "$DASH" selroll_coord_bad_messages_total); [ -n "$v" ] && echo "$v" >"$T/m.c"
  v=$(scrape "$GATE_M" selroll_gate_bad_messages_total); [ -n "$v" ] && echo "$v" >"$T/m.g"
  v=$(scrape "$ENV_M" selroll_envw_errors_total); [ -n "$v" ] && echo "$v" >"$T/m.e"
  v=$(scrape "$ACTOR_M" selroll_actor_bad_bus_total); [ -n "$v" ] && echo "$v" >"$T/m.a"
}
( while kill -0 "$RUN_PID" 2>/dev/null && [ ! -f "$T/attack.done" ]; do sample; sleep 1; done ) &
SAMPLER_PID=$!
pids+=("$SAMPLER_PID")
say "hostile: $N messages to each of work, bus, env, trainer, policy HTTP and dashboard HTTP during the round"
"$PY" tests/py/hostile.py --n "$N" --work "$WORK_EP" --bus "$BUS_PUB_EP" --env "$ENV_WORKERS" \
  --trainer "tcp://127.0.0.1:$TP" --http "$POLICY_URL" --seeds tests/fuzz/corpus/fuzz_proto --run hostile \
  --dash "$DASH" --dash-seeds tests/fuzz/corpus/fuzz_dashboard_http \
  >"$T/hostile.out" 2>&1 || bad "hostile.py: $(tail -n 3 "$T/hostile.out")"
touch "$T/attack.done"; wait "$SAMPLER_PID" 2>/dev/null
sed 's/^/   /' "$T/hostile.out"
kill -0 "$RUN_PID" 2>/dev/null || say "(the round ended before the last message was sent)"
if kill -0 "$RUN_PID" 2>/dev/null; then
  curl -sf "$POLICY_URL/health" >/dev/null 2>&1 && say "policy server still answers /health" \
    || bad "policy server does not answer /health after the attack"
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$DASH/health")
  [ "$code" = 200 ] && say "dashboard still answers /health 200" \
    || bad "dashboard /health answered '$code' after the attack"
fi
# The counters after the attack: scraped now if the roles still run, else the last scrape during it.
kill -0 "$RUN_PID" 2>/dev/null && sample
c1=$(cat "$T/m.c" 2>/dev/null); g1=$(cat "$T/m.g" 2>/dev/null)
e1=$(cat "$T/m.e" 2>/dev/null); a1=$(cat "$T/m.a" 2>/dev/null)
say "after: coordinator ${c1:-?}, gate ${g1:-?}, env worker ${e1:-?}, actor-1 bus ${a1:-?} (from /metrics)"
[ "${c1:-0}" -gt "${c0:-0}" ] || bad "coordinator's selroll_coord_bad_messages_total did not grow"
[ "${g1:-0}" -gt "${g0:-0}" ] || bad "gate's selroll_gate_bad_messages_total did not grow"
[ "${e1:-0}" -gt "${e0:-0}" ] || bad "env worker's selroll_envw_errors_total did not grow"
[ "${a1:-0}" -gt "${a0:-0}" ] || bad "actor-1's selroll_actor_bad_bus_total did not grow"

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
# Every group correct in the round file (written from Redis's one copy per job): each of the 6
# groups has its 4 trajectories, each job once.
out=$("$PY" - "$T/r/rounds/round-0.jsonl" <<'PYEOF'
import collections, json, sys
jobs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    jobs[r["group"]].append(r["job_id"])
bad = [g for g, j in jobs.items() if len(j) != 4 or len(set(j)) != 4]
print("%d groups, %d results%s" % (len(jobs), sum(map(len, jobs.values())),
      (", wrong: " + " ".join(bad)) if bad else ""))
sys.exit(0 if len(jobs) == 6 and not bad else 1)
PYEOF
) && say "round file: $out, each job once" || bad "round file: $out"
grep -q "crashed\|signal 11\|signal 6\|SIGSEGV\|SIGABRT" "$T/run.err" "$T"/r/logs/*.log \
  && bad "a process crashed: $(grep -h "crashed\|signal 11\|signal 6" "$T/run.err" "$T"/r/logs/*.log | head -n 2)"

kill -TERM "$TRAINER_PID" 2>/dev/null; wait "$TRAINER_PID" 2>/dev/null
kill -0 "$TRAINER_PID" 2>/dev/null && bad "trainer did not stop"

# The trainer serves no /metrics: its count is its final counter line.
trainer=$(grep -o '[0-9]* discarded messages' "$T/trainer.out" | tail -n 1)
say "trainer counted ${trainer:-?}"
[ "${trainer%% *}" -gt 0 ] 2>/dev/null || bad "trainer counted no garbage"
grep -q "ignoring a peer" "$T/r/logs/coordinator.log" && say "coordinator: the garbage peer was ignored" \
  || bad "coordinator never ignored the peer that kept sending garbage"
grep -q "ignoring a client" "$T/r/logs/env-worker-1.log" && say "env worker: the garbage client was ignored" \
  || bad "env worker never ignored the client that kept sending garbage"

say "it_hostile: $(( $(date +%s) - t0 )) s"
[ $fail -eq 0 ] && echo "it_hostile: ok" || echo "it_hostile: FAILED"
exit $fail
