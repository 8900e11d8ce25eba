#!/usr/bin/env bash
# it_train.sh: the training loop end to end with real processes. `selroll run` (its own private
# redis-server, env workers, policy server, gate, coordinator, built-in trainer and actors) trains
# the built-in policy for a few iterations on each of IT_TRAIN_SEEDS run seeds; each run must
# finish, write iterations.jsonl with one line per iteration and a held-out evaluation at
# iteration 0 and at the end, batches under batches/, and its held-out success at the end must be
# strictly above iteration 0's. Then a run with docs/examples/trainer.py as the external trainer
# proceeds on its acks (the version advances once per iteration, the info is the example's): it
# refuses the first batch with ok false and a reason (the run logs the reason and sends the batch
# again), checks every group's advantages against its rewards with the BATCH's estimator and
# audit_weight (the gate runs the audit rule, so audited groups with a weight 1/q may appear), and
# acks. Last, runs that fail loudly: with a policy server answering 400 to every chat completion
# (tests/py/openai_400.py) and with an env-worker endpoint nobody serves, `selroll run` exits 1 and
# its last line names the most frequent error.
#
# Sizes: 10 iterations on each of 3 seeds, as the training loop's acceptance test asks (about six
# minutes on two cores); IT_TRAIN_ITERS, IT_TRAIN_SEEDS and IT_TRAIN_EVAL shrink it for a quick
# local check. docs/training.md ("Iterations") gives the measured figures.
# time limit: 1200 s
set -u
cd "$(dirname "$0")/.."
S=bin/selroll
PY=${SELROLL_PYTHON:-/usr/bin/python3}
ITERS=${IT_TRAIN_ITERS:-10}
SEEDS=${IT_TRAIN_SEEDS:-"1 2 3"}
EVAL=${IT_TRAIN_EVAL:-48}
fail=0
T=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
# free_ports N: N distinct free loopback ports (all held open until each is chosen).
free_ports() {
  "$PY" -c 'import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}

# heldout FILE FIRST|LAST: the held-out success of the first or last evaluation line.
heldout() {
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if '"type":"eval"' in l]
print(ev[0 if sys.argv[2] == "FIRST" else -1]["heldout_success"] if ev else -1)
EOF
}

for seed in $SEEDS; do
  out="$T/seed$seed"
  start=$(date +%s)
  timeout 300 "$S" run --run "train$seed" --out "$out" --seed "$seed" --iters "$ITERS" \
    --eval-tasks "$EVAL" --eval-every 0 --grace-ms 2000 >"$T/seed$seed.out" 2>"$T/seed$seed.err"
  rc=$?
  took=$(( $(date +%s) - start ))
  [ $rc -eq 0 ] && ok "seed $seed: selroll run finished in ${took}s" || {
    bad "seed $seed: selroll run exited $rc after ${took}s"; tail -5 "$T/seed$seed.err"; continue; }
  n=$(grep -c '"type":"iteration"' "$out/iterations.jsonl")
  [ "$n" -eq "$ITERS" ] && ok "seed $seed: $n iteration lines" || bad "seed $seed: $n iteration lines, want $ITERS"
  ne=$(grep -c '"type":"eval"' "$out/iterations.jsonl")
  [ "$ne" -eq 2 ] && ok "seed $seed: evaluations at iteration 0 and at the end" || bad "seed $seed: $ne evaluations"
  nb=$(ls "$out/batches" 2>/dev/null | wc -l)
  [ "$nb" -ge 1 ] && ok "seed $seed: $nb batch files" || bad "seed $seed: no batch file"
  grep -q "valid_unseen" "$out"/batches/*.jsonl && bad "seed $seed: a held-out task in a batch" || ok "seed $seed: no held-out task in any batch"
  grep -q '^summary: policy v0 -> v' "$T/seed$seed.out" && ok "seed $seed: summary line" || bad "seed $seed: no summary line"
  # Groups the gate cancelled had requests aborted mid-generation: the policy server counts their
  # tokens in Redis and the iterations report them.
  read -r cancelled aborted < <("$PY" -c '
import json, sys
it = [json.loads(l) for l in open(sys.argv[1]) if "\"type\":\"iteration\"" in l]
print(sum(i.get("groups_cancelled", 0) for i in it), sum(i.get("aborted_tokens", 0) for i in it))' "$out/iterations.jsonl")
  if [ "${cancelled:-0}" -eq 0 ] || [ "${aborted:-0}" -gt 0 ]; then
    ok "seed $seed: $cancelled groups cancelled, $aborted aborted tokens counted"
  else
    bad "seed $seed: $cancelled groups cancelled but no aborted token counted"
  fi
  first=$(heldout "$out/iterations.jsonl" FIRST)
  last=$(heldout "$out/iterations.jsonl" LAST)
  if "$PY" -c "import sys; sys.exit(0 if float('$last') > float('$first') else 1)"; then
    ok "seed $seed: held-out success $first -> $last after $ITERS iterations"
  else
    bad "seed $seed: held-out success $first -> $last after $ITERS iterations (not above)"
  fi
done

# --- the external example trainer --------------------------------------------------------------
if "$PY" -c 'import zmq, msgpack' 2>/dev/null; then
  # The built-in policy server loads each version's weights from Redis: the example trainer
  # copies the batch's version to the one it acks there (--redis), in a Redis of the test's own.
  read -r p1 p2 rp < <(free_ports 3)
  redis-server --port "$rp" --bind 127.0.0.1 --dir "$T" --save '' --appendonly no \
    >"$T/ext.redis" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do redis-cli -p "$rp" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
  "$PY" docs/examples/trainer.py --pull "tcp://127.0.0.1:$p1" --push "tcp://127.0.0.1:$p2" \
    --run ext --check --refuse-first --redis "redis://127.0.0.1:$rp" >"$T/ext.trainer" 2>&1 &
  pids+=($!)
  out="$T/ext"
  # The audit rule with q = 0.5 over a gate that cuts early (K = 2, a loose threshold): groups it
  # would cut run on with audit_weight 2 about half the time. Groups of 8: the built-in policy's
  # groups agree on their first steps as an LLM agent's do, so the gate cuts most of them and
  # groups of 4 are too rarely mixed to fill a batch in the backfill waves of one iteration.
  timeout 200 "$S" run --run ext --out "$out" --iters 2 --batch-groups 2 --group-size 8 \
    --eval-tasks 4 --trainer "tcp://127.0.0.1:$p1,tcp://127.0.0.1:$p2" --grace-ms 2000 \
    --redis "redis://127.0.0.1:$rp" \
    --gate-rule audit --gate-rule-args "--audit-q 0.5" --k 2 --threshold 0.9 \
    >"$T/ext.out" 2>"$T/ext.err"
  rc=$?
  [ $rc -eq 0 ] && ok "external trainer: selroll run finished" || { bad "external trainer: rc=$rc"; tail -5 "$T/ext.err"; }
  n=$(grep -c '"trainer_info":"acknowledged without training' "$out/iterations.jsonl" 2>/dev/null)
  if [ "$n" = 2 ]; then ok "external trainer: both iterations advanced on its acks"; else
    bad "external trainer: ${n:-no} acked iterations (ports $p1 $p2)"
    tail -5 "$T/ext.err"; tail -3 "$T/ext.out"; tail -c 600 "$out/iterations.jsonl" 2>/dev/null; echo
    grep -E 'warn|error|WEIGHTS_READY' "$out"/logs/coordinator*.log 2>/dev/null | tail -5
  fi
  grep -q '"policy_version_after":2' "$out/iterations.jsonl" && ok "external trainer: version 2 at the end" || bad "external trainer: version did not reach 2"
  grep -q "iteration 1 -> acknowledged" "$T/ext.trainer" && ok "external trainer: saw iteration 1" || bad "external trainer: its log: $(tail -2 "$T/ext.trainer")"
  # The refusal: ok false with a reason, logged by the coordinator, the batch sent again.
  if grep -q "the trainer refused the batch (version stays 0): --refuse-first" "$out"/logs/coordinator*.log 2>/dev/null &&
     grep -q "BATCH of .* sent to the trainer (.*, again)" "$out"/logs/coordinator*.log; then
    ok "external trainer: its ok:false refusal was logged with the reason and the batch sent again"
  else
    bad "external trainer: no logged refusal or no resend"; grep -E "refused|again" "$out"/logs/coordinator*.log | tail -3
  fi
  nc=$(grep -c "follow from the rewards (grpo)" "$T/ext.trainer")
  aud=$(sed -n 's/.*(\([0-9]*\) audited).*/\1/p' "$T/ext.trainer" | awk '{s += $1} END {print s + 0}')
  [ "$nc" -ge 2 ] && ok "external trainer: every group's advantages follow from rewards, estimator and audit_weight ($aud audited groups)" ||
    bad "external trainer: advantages not checked: $(grep -E 'refused|follow' "$T/ext.trainer" | tail -2)"
  # Every step of iteration 1 was answered by version 1, the one the trainer acked (and stored).
  if grep -q '"served_version":1' "$out"/rounds/*.jsonl 2>/dev/null &&
     ! grep -q "answered by policy version" "$out"/logs/coordinator*.log; then
    ok "external trainer: the steps of iteration 1 were answered by version 1"
  else
    bad "external trainer: no step answered by version 1, or steps of another version"
    grep "answered by policy version" "$out"/logs/coordinator*.log | tail -2
  fi
  # The same trainer without --redis acks version 1 but stores no weights for it: the built-in
  # policy server cannot serve it, the actors' requests for it fail, and the run stops naming it.
  read -r p1 p2 < <(free_ports 2)
  "$PY" docs/examples/trainer.py --pull "tcp://127.0.0.1:$p1" --push "tcp://127.0.0.1:$p2" \
    --run nowt >"$T/nowt.trainer" 2>&1 &
  pids+=($!)
  timeout 120 "$S" run --run nowt --out "$T/nowt" --iters 2 --batch-groups 1 --group-size 2 \
    --eval-tasks 0 --trainer "tcp://127.0.0.1:$p1,tcp://127.0.0.1:$p2" --no-gate --grace-ms 1000 \
    --actors 1 --env-workers 1 --redis "redis://127.0.0.1:$rp" >"$T/nowt.log" 2>&1
  rc=$?
  last=$(tail -1 "$T/nowt.log")
  if [ $rc -eq 1 ] && [[ "$last" == "selroll run: iteration 1: "*"policy version 1 has no weights"* ]]; then
    ok "external trainer without weights: selroll run exits 1: $last"
  else
    bad "external trainer without weights: rc=$rc, last line: $last"; tail -4 "$T/nowt.log"
  fi
  "$S" status --redis "redis://127.0.0.1:$rp" --run nowt >"$T/nowt.status" 2>&1
  grep -q "^the run failed: iteration 1: .*policy version 1 has no weights" "$T/nowt.status" &&
    ok "selroll status names why the run failed" || { bad "selroll status of the failed run:"; head -3 "$T/nowt.status"; }
else
  echo "skip external trainer: python3-zmq or python3-msgpack missing"
fi
# --- runs that fail loudly ----------------------------------------------------------------------
# A policy server that answers 400 to every chat completion: iteration 0 fails entirely.
read -r pp dead < <(free_ports 2)
"$PY" tests/py/openai_400.py --port "$pp" --model stub-model >"$T/f400.stub" 2>&1 &
pids+=($!)
for _ in $(seq 50); do grep -q listening "$T/f400.stub" && break; sleep 0.1; done
out="$T/f400"
timeout 120 "$S" run --run f400 --out "$out" --iters 2 --batch-groups 1 --group-size 2 \
  --eval-tasks 0 --trainer none --actors 1 --env-workers 1 --no-gate --grace-ms 1000 \
  --actor-args "--policy http://127.0.0.1:$pp/v1 --model stub-model --llm-retries 0" \
  >"$T/f400.log" 2>&1
rc=$?
last=$(tail -1 "$T/f400.log")
if [ $rc -eq 1 ] && [[ "$last" == "selroll run: iteration 0: "*" trajectories failed; most frequent error ("*"x): "*400* ]]; then
  ok "all-400 policy: selroll run exits 1: $last"
else
  bad "all-400 policy: rc=$rc, last line: $last"; tail -4 "$T/f400.log"
fi
# An env-worker endpoint nobody serves: round 0 of a plain run fails entirely.
out="$T/fdead"
timeout 120 "$S" run --run fdead --out "$out" --groups 2 --group-size 2 --iters 2 --actors 1 \
  --env-workers 1 --no-gate --grace-ms 1000 \
  --actor-args "--env-workers tcp://127.0.0.1:$dead --env-timeout-ms 300" >"$T/fdead.log" 2>&1
rc=$?
last=$(tail -1 "$T/fdead.log")
if [ $rc -eq 1 ] && [[ "$last" == "selroll run: round 0: 4 of 4 trajectories failed; most frequent error (4x): "* ]] &&
   grep -q "trajectories 4 (failed 4)" "$T/fdead.log"; then
  ok "dead env worker: selroll run exits 1: $last"
else
  bad "dead env worker: rc=$rc, last line: $last"; tail -4 "$T/fdead.log"
fi
exit $fail
