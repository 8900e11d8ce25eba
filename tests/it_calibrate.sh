#!/usr/bin/env bash
# it_calibrate.sh: `selroll bench calibrate` at a small size prints the reference table (outcome
# mix, per task type, and per label the d_K quartiles, share below 0.12 and ended share at K = 10,
# 15 and 20), at version 0 over two policy seeds and after a few in-process training iterations;
# bad values are one-line errors. The figures are a benchmark: no thresholds on them here.
cd "$(dirname "$0")/.."
. tests/itlib.sh

out=$(timeout 120 $S bench calibrate --split train --tasks 12 --policy-seeds 2 --heldout-tasks 6 2>&1)
rc=$?
echo "$out" | sed -n '/^reference table/,$p'
if [ $rc -eq 0 ] && echo "$out" | grep -q '^reference table (version 0; 24 groups' &&
   echo "$out" | grep -q 'outcome mix: all fail' &&
   echo "$out" | grep -q 'greedy held-out success (valid_unseen, first 6 tasks)' &&
   [ "$(echo "$out" | grep -cE '^  \| (10|15|20) \| (all fail|all succeed|mixed) \|')" -eq 9 ]; then
  ok "bench calibrate prints the reference table at version 0 (2 seeds x 12 tasks)"
else
  bad "bench calibrate at version 0 (rc=$rc)"
fi

out=$(timeout 120 $S bench calibrate --train-iterations 4 --train-tasks 4 --heldout-tasks 4 2>&1)
rc=$?
echo "$out" | sed -n '/^reference table/,$p'
if [ $rc -eq 0 ] && echo "$out" | grep -q '^calibrate: 4 training iterations of 4 train tasks' &&
   echo "$out" | grep -q '^reference table (groups of the last 3 training iterations; 12 groups' &&
   echo "$out" | grep -q 'after training'; then
  ok "bench calibrate --train-iterations measures the groups of the last 3 iterations"
else
  bad "bench calibrate --train-iterations (rc=$rc)"
fi

for arg in "--policy-seeds 0" "--train-iterations -1" "--train-lr 0" "--prior-belief x" "--tasks 0"; do
  err=$($S bench calibrate $arg 2>&1 >/dev/null)
  rc=$?
  if [ $rc -eq 2 ] && [ "$(echo "$err" | wc -l)" -eq 1 ] && echo "$err" | grep -q "^bench calibrate: ${arg%% *} "; then
    ok "bench calibrate $arg is a one-line error"
  else
    bad "bench calibrate $arg: rc=$rc, '$err'"
  fi
done
$S bench calibrate --help | grep -q -- '--train-iterations' && ok "--help lists --train-iterations" ||
  bad "--help lacks --train-iterations"
exit $fail
