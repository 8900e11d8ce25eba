#!/usr/bin/env bash
# it_cli.sh: every subcommand listed by `selroll --help` answers --help with exit 0 and a usage line;
# an unknown command and no command exit 2 with a one-line error; so does `selroll run` given a run
# name Redis keys cannot carry, or a dashboard address (--http) that is in use, before it starts
# anything; a child refusing its arguments (exit 2) stops `selroll run` with exit 2 at once;
# `selroll bench rollout --only` refuses a bad case name and runs the saturation case alone: a rate measured from the steps' t_ms in its results files, CPU and context switches per
# step by role and their sum less the policy server's (the orchestration); --repeat 2 runs it twice and adds the medians (--repeat outside 1-9 is a one-line
# error); --local-env-workers 1 runs it with the env workers inside the actors (a bad count, or
# `selroll actor` given both --env-workers and --local-env-workers, is a one-line error); with
# --skip-system it times only the gate core and the ZeroMQ and plain-socket round trips.
set -u
cd "$(dirname "$0")/.."
S=bin/selroll
fail=0
$S --help >/dev/null || { echo "selroll --help failed"; fail=1; }
cmds=$($S --help | awk '/^commands:/{f=1;next} f && NF {print $1}')
[ -n "$cmds" ] || { echo "no commands listed"; exit 1; }
for c in $cmds; do
  [ "$c" = version ] && continue
  out=$($S "$c" --help 2>&1); rc=$?
  if [ $rc -ne 0 ] || ! grep -qi '^usage' <<<"$out"; then echo "selroll $c --help: rc=$rc"; fail=1; fi
done
$S no-such-command 2>/dev/null; [ $? -eq 2 ] || { echo "unknown command must exit 2"; fail=1; }
$S 2>/dev/null; [ $? -eq 2 ] || { echo "no command must exit 2"; fail=1; }
out=$($S run --run 'a+b' 2>&1); rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "not a run name" <<<"$out"; } ||
  { echo "selroll run --run 'a+b': rc=$rc: $out"; fail=1; }
# A child that refuses its arguments (exit 2, here an actor given a bad flag through --actor-args)
# is not restarted in a loop: selroll run stops everything and exits 2 naming it.
T=$(mktemp -d)
out=$(timeout 60 $S run --out "$T/r" --groups 1 --iters 1 --http off --actor-args --bogus-flag 2>&1 >/dev/null); rc=$?
# The first actor to refuse is named, whichever it is (the others may be stopped before they parse).
who=$(sed -n 's/^selroll run: \(actor-[0-9]\) refused its arguments (exit 2); see .*/\1/p' <<<"$out")
{ [ $rc -eq 2 ] && grep -q "^selroll run: actor-[0-9] refused its arguments (exit 2); see $T/r/logs/$who.log$" <<<"$out" &&
  [ -n "$who" ] && grep -q "bogus-flag" "$T/r/logs/$who.log" && ! grep -q "restarted actor" <<<"$out"; } ||
  { echo "selroll run --actor-args --bogus-flag: rc=$rc: $out"; fail=1; }
# Argument lists are bounded before any child starts: 200 words in --actor-args is one line, exit 2,
# no logs folder (nothing was started); 64 words is the limit.
words=$(printf -- '--x%d ' $(seq 200))
out=$(timeout 20 $S run --out "$T/w" --groups 1 --iters 1 --http off --actor-args "$words" 2>&1 >/dev/null); rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "^selroll run: --actor-args: 200 words, at most 64$" <<<"$out" &&
  [ ! -d "$T/w/logs" ]; } || { echo "selroll run --actor-args with 200 words: rc=$rc: $out"; fail=1; }
words=$(printf -- '--x%d ' $(seq 65))
out=$(timeout 20 $S run --out "$T/w" --groups 1 --iters 1 --http off --gate-rule-args "$words" 2>&1 >/dev/null); rc=$?
{ [ $rc -eq 2 ] && grep -q "^selroll run: --gate-rule-args: 65 words, at most 64$" <<<"$out"; } ||
  { echo "selroll run --gate-rule-args with 65 words: rc=$rc: $out"; fail=1; }
rm -rf "$T"
PY=${SELROLL_PYTHON:-/usr/bin/python3}
out=$("$PY" - "$S" <<'EOF'
import socket, subprocess, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
addr = "127.0.0.1:%d" % s.getsockname()[1]
p = subprocess.run([sys.argv[1], "run", "--http", addr], capture_output=True, text=True)
print(p.returncode, p.stderr.strip())
EOF
)
grep -q "^2 selroll run: --http: 127.0.0.1:[0-9]* is in use$" <<<"$out" ||
  { echo "selroll run --http on a busy port: $out"; fail=1; }
# The rollout benchmark: a bad --only is a one-line error (exit 2); the saturation case runs the
# whole system through `selroll run` and prints CPU per step by role from the run's cpu.tsv, and
# their sum less the policy server's (the orchestration) as one figure.
out=$($S bench rollout --only bogus 2>&1); rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "only wants" <<<"$out"; } ||
  { echo "selroll bench rollout --only bogus: rc=$rc: $out"; fail=1; }
out=$($S bench rollout --repeat 10 2>&1); rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "repeat wants a count" <<<"$out"; } ||
  { echo "selroll bench rollout --repeat 10: rc=$rc: $out"; fail=1; }
# Two runs: each prints its lines, then one line gives the medians and lists both runs' rates.
out=$($S bench rollout --quick --only saturation --repeat 2 2>&1); rc=$?
{ [ $rc -eq 0 ] && [ "$(grep -Ec "^rollout saturation: 3 actors x 64 slots, cost model off: [1-9][0-9]* steps, [1-9][0-9]* steps/s" <<<"$out")" -eq 2 ] &&
  [ "$(grep -Ec "^rollout saturation: CPU us per step by role: .*env-worker [0-9]+.*actor [0-9]+" <<<"$out")" -eq 2 ] &&
  [ "$(grep -Ec "^rollout saturation: context switches per step by role: .*env-worker [0-9]+\.[0-9]{2}.*actor [0-9]*\.[0-9]*[1-9]" <<<"$out")" -eq 2 ] &&
  grep -Eq "^rollout saturation: median of 2 runs: [1-9][0-9]* steps/s \(runs: [1-9][0-9]*, [1-9][0-9]*\), CPU [1-9][0-9]* us per step$" <<<"$out" &&
  [ "$(grep -Ec "^rollout saturation: orchestration CPU [1-9][0-9]* us per step \(every role but the policy server, summed\)$" <<<"$out")" -eq 2 ] &&
  grep -Eq "^rollout saturation: median of 2 runs: orchestration CPU [1-9][0-9]* us per step \(runs: [1-9][0-9]*, [1-9][0-9]*\)$" <<<"$out" &&
  ! grep -q "rollout overhead\|rollout 50ms" <<<"$out"; } ||
  { echo "selroll bench rollout --quick --only saturation --repeat 2: rc=$rc: $out"; fail=1; }
# --tokens with two modes: the saturation case runs once per mode, each line naming its mode.
out=$($S bench rollout --quick --only saturation --tokens off,completion 2>&1); rc=$?
{ [ $rc -eq 0 ] &&
  [ "$(grep -Ec "^rollout saturation: --tokens (off|completion): 3 actors x 64 slots, cost model off: [1-9][0-9]* steps, [1-9][0-9]* steps/s" <<<"$out")" -eq 2 ] &&
  grep -q "^rollout saturation: --tokens off: 3 actors" <<<"$out" &&
  grep -q "^rollout saturation: --tokens completion: 3 actors" <<<"$out" &&
  [ "$(grep -Ec "^rollout saturation: --tokens (off|completion): CPU us per step by role: .*actor [0-9]+" <<<"$out")" -eq 2 ] &&
  [ "$(grep -Ec "^rollout saturation: --tokens (off|completion): orchestration CPU [1-9][0-9]* us per step \(every role but the policy server, summed\)$" <<<"$out")" -eq 2 ] &&
  [ "$(grep -c "^rollout saturation: --tokens" <<<"$out")" -eq 8 ] &&
  ! grep -q "rollout overhead\|rollout 50ms" <<<"$out"; } ||
  { echo "selroll bench rollout --quick --only saturation --tokens off,completion: rc=$rc: $out"; fail=1; }
# --local-env-workers: a bad count and a clash with --env-workers are one-line errors (exit 2);
# the saturation case with one env worker inside each actor runs no env-worker process.
out=$($S bench rollout --local-env-workers 0 2>&1); rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "local-env-workers wants a count" <<<"$out"; } ||
  { echo "selroll bench rollout --local-env-workers 0: rc=$rc: $out"; fail=1; }
# --action-batch-ms: out of range is a one-line error, for the bench and for the actor.
out=$($S bench rollout --action-batch-ms 1001 2>&1); rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "action-batch-ms wants 0 to 1000" <<<"$out"; } ||
  { echo "selroll bench rollout --action-batch-ms 1001: rc=$rc: $out"; fail=1; }
out=$($S actor --coordinator tcp://127.0.0.1:9 --action-batch-ms -1 2>&1); rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "action-batch-ms" <<<"$out"; } ||
  { echo "selroll actor --action-batch-ms -1: rc=$rc: $out"; fail=1; }
$S actor --help 2>&1 | grep -q -- "--action-batch-ms MS" ||
  { echo "selroll actor --help does not list --action-batch-ms"; fail=1; }
out=$($S actor --coordinator tcp://127.0.0.1:9 --env-workers tcp://127.0.0.1:9 --local-env-workers 1 2>&1); rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "exclude each other" <<<"$out"; } ||
  { echo "selroll actor --env-workers with --local-env-workers: rc=$rc: $out"; fail=1; }
out=$($S bench rollout --quick --only saturation --local-env-workers 1 2>&1); rc=$?
{ [ $rc -eq 0 ] && grep -q "^rollout: every system case with 1 env workers in each actor's process" <<<"$out" &&
  grep -Eq "^rollout saturation: 3 actors x 64 slots, cost model off: [1-9][0-9]* steps, [1-9][0-9]* steps/s" <<<"$out" &&
  grep -Eq "^rollout saturation: CPU us per step by role: .*actor [0-9]+" <<<"$out" &&
  ! grep -q "env-worker [0-9]" <<<"$out"; } ||
  { echo "selroll bench rollout --quick --only saturation --local-env-workers 1: rc=$rc: $out"; fail=1; }
out=$($S bench rollout --quick --skip-system 2>&1); rc=$?
{ [ $rc -eq 0 ] && grep -Eq "^rollout gate-core: 160000 ACTIONs" <<<"$out" &&
  grep -Eq "^rollout wire: a 512-byte round trip over loopback TCP, 2000 times: ZeroMQ DEALER/ROUTER [1-9][0-9]* us, [0-9]+ us of CPU .*plain sockets [0-9]+ us" <<<"$out" &&
  ! grep -q "rollout overhead\|rollout saturation\|rollout 50ms" <<<"$out"; } ||
  { echo "selroll bench rollout --quick --skip-system: rc=$rc: $out"; fail=1; }
[ $fail -eq 0 ] && echo "ok   every --help, bad commands and flags, bounded --*-args, bench rollout --only with CPU and context switches by role, --repeat with medians and --local-env-workers, the gate core and wire parts alone"
exit $fail
