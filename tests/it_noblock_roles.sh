#!/usr/bin/env bash
# it_noblock_roles.sh: Redis off every loop but the scheduler's (it_noblock.sh covers that one).
# Real processes — a `selroll coordinator` with its dashboard, a gate, an env worker that
# registers, a policy server with its weights in Redis — and a private redis-server, SIGSTOPped for
# 3 s while tests/py/noblock_roles.py probes every role round after round and publishes converged
# groups' ACTIONs on the bus:
#  - during the stall the probes (the gate's /metrics, the policy server's /health and a chat
#    completion, the dashboard's /api/state, /health and page, an env worker RESET and STEP) answer
#    within 50 ms (p99 of all of them, p95 of each kind, none near the 2 s Redis timeout), and the
#    gate consumes the bus (its ACTIONs counter moves);
#  - a request for a policy version that is not cached, sent during the stall, holds up nothing and
#    is answered once Redis is back;
#  - after SIGCONT everything catches up: the gate's decisions and cancels are in the group hashes,
#    the env worker's entry (expired during the stall) is written again, the dashboard's /health is
#    200 again; on SIGTERM the env worker deletes its entry.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_redis_start
rpid=${pids[-1]}
trap 'kill -CONT $rpid 2>/dev/null; it_cleanup' EXIT
stall="$tmp/stall"
run=nr
G=4
K=2
TOK=tok-nr

eport=$(free_port)
$S env-worker --bind "tcp://127.0.0.1:$eport" --redis "$RURL" --run $run --id envw-nr --capacity 64 \
  --heartbeat-ms 500 >"$tmp/envw.log" 2>&1 &
epid=$!
pids+=($epid)

hport=$(free_port)
$S coordinator --redis "$RURL" --run $run --work-bind 'tcp://127.0.0.1:*' \
  --bus-pub-bind 'tcp://127.0.0.1:*' --bus-sub-bind 'tcp://127.0.0.1:*' \
  --http "127.0.0.1:$hport" --http-token $TOK --out "$tmp/out" --iters 3 --groups 4 \
  --group-size $G --lease-ms 2000 --heartbeat-ms 300 --env-workers "tcp://127.0.0.1:$eport" \
  2>"$tmp/coord.log" &
cpid=$!
pids+=($cpid)
work= buspub=
for _ in $(seq 100); do
  work=$(sed -n 's/.*coordinator of run [^:]*: work \(tcp:[^,]*\),.*/\1/p' "$tmp/coord.log")
  buspub=$(sed -n 's/.*coordinator of run [^:]*: .*bus pub \(tcp:[^,]*\),.*/\1/p' "$tmp/coord.log")
  [ -n "$work" ] && [ -n "$buspub" ] && break
  sleep 0.05
done
[ -n "$work" ] && [ -n "$buspub" ] || { bad "the coordinator did not start"; cat "$tmp/coord.log"; exit 1; }

gport=$(free_port)
$S gate --coordinator "$work" --redis "$RURL" --run $run --mode enforce --k $K --group-size $G \
  --metrics-port "$gport" >"$tmp/gate.log" 2>&1 &
pids+=($!)
pport=$(free_port)
$S policy-server --listen "127.0.0.1:$pport" --redis "$RURL" --run $run --time-scale 1000 \
  >"$tmp/policy.log" 2>&1 &
pids+=($!)
for p in "$gport" "$pport" "$hport"; do
  wait_port "$p" || { bad "nothing listens on port $p"; tail -5 "$tmp"/*.log; exit 1; }
done
for _ in $(seq 100); do
  grep -q "welcomed by the coordinator" "$tmp/gate.log" && [ "$($R scard selroll:$run:groups:0)" = 4 ] &&
    [ "$($R exists selroll:$run:envw:envw-nr)" = 1 ] &&
    [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOK" "http://127.0.0.1:$hport/api/state")" = 200 ] &&
    break
  sleep 0.1
done
gids=$($R smembers selroll:$run:groups:0 | sort | paste -sd, -)
[ "$($R exists selroll:$run:envw:envw-nr)" = 1 ] && ok "the env worker registered" ||
  bad "the env worker did not register"
[ "$(echo "$gids" | tr , '\n' | wc -l)" = 4 ] || { bad "the round's groups are not in Redis: $gids"; exit 1; }

"$PY" tests/py/noblock_roles.py --seconds 8 --stall-file "$stall" --gate-metrics "127.0.0.1:$gport" \
  --policy "127.0.0.1:$pport" --dashboard "127.0.0.1:$hport" --token $TOK \
  --envw "tcp://127.0.0.1:$eport" --bus-pub "$buspub" --run $run --groups "$gids" \
  --group-size $G --k $K >"$tmp/probe.json" 2>"$tmp/probe.err" &
ppid=$!
pids+=($ppid)
sleep 1.5
touch "$stall"; kill -STOP "$rpid"
sleep 3
kill -CONT "$rpid"; rm -f "$stall"
# the env worker's entry, expired during the stall, is written again: how soon after SIGCONT
(
  t0=$(date +%s%N)
  for _ in $(seq 100); do
    ttl=$($R pttl selroll:$run:envw:envw-nr)
    [ "$ttl" -gt 0 ] 2>/dev/null && { echo "$((($(date +%s%N) - t0) / 1000000)) $ttl" >"$tmp/rereg"; exit 0; }
    sleep 0.05
  done
) &
regpid=$!
wait "$ppid"
out=$(cat "$tmp/probe.json")
[ -n "$out" ] || { bad "the probe printed nothing"; cat "$tmp/probe.err"; exit 1; }

"$PY" - "$out" <<'PYEOF' && ok "stall: every role answered within 50 ms (p99 of all probes, p95 of each kind) while Redis was stopped" || bad "stall: latencies or errors (above)"
import json, sys
o = json.loads(sys.argv[1])
bad = []
kinds = ("gate_metrics", "policy_health", "policy_chat", "dash_state", "dash_health", "dash_page",
         "env_reset", "env_step")
pooled = []
for k in kinds:
    v = o[k]
    pooled += v["lat"]
    # each kind: p95 within 50 ms, and the worst one far below the 2 s Redis timeout that a
    # handler waiting on Redis would add (a loaded 2-core machine can deschedule the probe itself
    # for a few hundred ms, all kinds at once)
    if v["n"] < 20 or v["p95"] >= 50 or v["max"] >= 1000 or v["errors"]:
        bad.append("%s n %d p95 %.1f max %.1f errors %d" % (k, v["n"], v["p95"], v["max"], v["errors"]))
pooled.sort()
p99 = pooled[int(len(pooled) * 0.99)] if pooled else 1e9
if p99 >= 50:
    bad.append("p99 of all %d probes %.1f ms" % (len(pooled), p99))
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
PYEOF
echo "$out" | "$PY" -c '
import json, sys
o = json.load(sys.stdin)
print("  " + ", ".join("%s p95 %.1f ms p99 %.1f ms max %.1f ms (%d)" % (k, v["p95"], v["p99"], v["max"], v["n"])
                       for k, v in o.items() if isinstance(v, dict)))'
"$PY" - "$out" $((4 * G * K)) <<'PYEOF' && ok "stall: the gate consumed the bus while Redis was stopped" || bad "stall: the gate's ACTIONs counter did not move: $out"
import json, sys
o = json.loads(sys.argv[1])
b, d = o["before_gate_actions"], o["stall_gate_actions"]
sys.exit(0 if b is not None and d is not None and d - b >= int(sys.argv[2]) else 1)
PYEOF
"$PY" - "$out" <<'PYEOF' && ok "stall: a request for an uncached version held up nothing and got its 404 once Redis was back" || bad "stall: the uncached version's request: $out"
import json, sys
sys.exit(0 if json.loads(sys.argv[1])["uncached_status"] == 404 else 1)
PYEOF

# ---- after SIGCONT: everything catches up --------------------------------------------------------
recorded=0
for _ in $(seq 100); do
  n=0
  for gid in ${gids//,/ }; do
    [ "$($R hget selroll:$run:group:$gid step)" = $K ] &&
      [ "$($R hget selroll:$run:group:$gid gate_reason)" = divergence ] &&
      [ "$($R hget selroll:$run:group:$gid status)" = cancelled ] && n=$((n + 1))
  done
  [ $n = 4 ] && { recorded=1; break; }
  sleep 0.1
done
[ $recorded = 1 ] && ok "after the stall: the gate's 4 decisions (cancel at step $K) are in the group hashes" ||
  { bad "after the stall: decisions recorded for $n of 4 groups"; tail -5 "$tmp/gate.log"
    for gid in ${gids//,/ }; do echo "$gid: $($R hgetall selroll:$run:group:$gid | paste -sd' ')"; done; }
m=$(curl -s "http://127.0.0.1:$gport/metrics")
echo "$m" | grep -q '^selroll_gate_cancels_total 4$' && echo "$m" | grep -q '^selroll_gate_recorded_total 4$' &&
  ok "after the stall: the gate published 4 CANCELs and recorded 4 decisions" ||
  bad "after the stall: gate counters: $(echo "$m" | grep -E '^selroll_gate_(cancels|recorded|redis_errors)_total')"
wait "$regpid"
if [ -s "$tmp/rereg" ]; then
  read -r took ttl <"$tmp/rereg"
  ok "after the stall: the env worker's entry is there again $took ms after SIGCONT (TTL $ttl ms)"
else
  bad "after the stall: the env worker's entry is missing"
fi
h=
for _ in $(seq 50); do
  h=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hport/health")
  [ "$h" = 200 ] && break
  sleep 0.1
done
[ "$h" = 200 ] && ok "after the stall: the dashboard's /health is 200 again" || bad "after the stall: dashboard /health $h"

kill -TERM "$epid"; wait "$epid"
[ "$($R exists selroll:$run:envw:envw-nr)" = 0 ] && ok "on SIGTERM the env worker deleted its entry" ||
  bad "the env worker's entry outlived it"
kill -TERM "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null
exit $fail
