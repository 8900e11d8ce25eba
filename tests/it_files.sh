#!/usr/bin/env bash
# it_files.sh: the coordinator's results files are written off its loop, on its file queue
# (coord_file_write), tried again after a failure and never silently lost. A training run with a
# regular file named batches/ in its results folder cannot write any batch file: it still
# finishes, every iteration's line reaches iterations.jsonl, each batch file is reported once
# ("not written after 5 attempts") and counted, and no temporary file is left. The same run with
# that file removed while the first batch write is being retried writes every batch file, the
# first one "after N failed attempts".
# time limit: 300 s
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
T=$tmp
ITERS=2
run() { # run NAME: a short training run into $T/NAME
  timeout 200 "$S" run --run "$1" --out "$T/$1" --seed 1 --iters $ITERS --batch-groups 2 \
    --group-size 4 --tasks 16 --eval-tasks 2 --eval-every 0 --grace-ms 2000 \
    >"$T/$1.out" 2>"$T/$1.err"
}

# --- a batches/ folder that cannot be made: reported, counted, the run goes on --------------------
mkdir -p "$T/blocked"
echo "in the way" >"$T/blocked/batches"
run blocked
rc=$?
[ $rc -eq 0 ] && ok "blocked: selroll run finished" || { bad "blocked: selroll run exited $rc"; tail -5 "$T/blocked.err"; }
n=$(grep -c '"type":"iteration"' "$T/blocked/iterations.jsonl" 2>/dev/null)
[ "${n:-0}" -eq $ITERS ] && ok "blocked: $n iteration lines" || bad "blocked: ${n:-0} iteration lines, want $ITERS"
nf=$(cat "$T"/blocked/logs/coordinator*.log 2>/dev/null | grep -c 'batches/iter_[0-9]*.jsonl not written after 5 attempts')
nb=$(cat "$T"/blocked/logs/coordinator*.log 2>/dev/null | grep -c 'BATCH of [0-9]* groups sent')
if [ "$nf" -ge 1 ] && [ "$nf" -eq "$nb" ]; then
  ok "blocked: each of the $nb batch files reported as not written"
else
  bad "blocked: $nf batch files reported not written, $nb batches sent"
  grep -E 'error|warn' "$T"/blocked/logs/coordinator*.log | tail -5
fi
[ "$(cat "$T/blocked/batches")" = "in the way" ] && ok "blocked: the file in the way is untouched" || bad "blocked: the file in the way changed"
left=$(find "$T/blocked" -name '*.tmp' | wc -l)
[ "$left" -eq 0 ] && ok "blocked: no temporary file left" || bad "blocked: $left temporary files left"

# --- the obstacle removed during the retries: every batch file written ----------------------------
mkdir -p "$T/cleared"
echo "in the way" >"$T/cleared/batches"
(
  # The first BATCH is logged right after its file was queued; the retries pause 0.1, 0.2, 0.4
  # and 0.8 s (1.5 s in all). The file is removed 0.3 s after the log line: late enough that the
  # file thread has made its first attempt even on a loaded machine (removed any earlier, the
  # first attempt may succeed and no retry is seen), early enough for a retry to succeed.
  for _ in $(seq 4000); do
    if cat "$T"/cleared/logs/coordinator*.log 2>/dev/null | grep -q 'BATCH of [0-9]* groups sent'; then
      sleep 0.3
      rm -f "$T/cleared/batches"; exit 0
    fi
    sleep 0.02
  done
) &
watcher=$!
pids+=($watcher)
run cleared
rc=$?
wait "$watcher" 2>/dev/null
[ $rc -eq 0 ] && ok "cleared: selroll run finished" || { bad "cleared: selroll run exited $rc"; tail -5 "$T/cleared.err"; }
nb=$(cat "$T"/cleared/logs/coordinator*.log 2>/dev/null | grep -c 'BATCH of [0-9]* groups sent')
nfiles=$(ls "$T/cleared/batches" 2>/dev/null | grep -c '^iter_[0-9]*\.jsonl$')
[ "$nb" -ge 1 ] && [ "$nfiles" -eq "$nb" ] && ok "cleared: all $nfiles batch files written" || bad "cleared: $nfiles batch files for $nb batches"
if cat "$T"/cleared/logs/coordinator*.log | grep -q 'iter_000000.jsonl written after [0-9] failed attempts'; then
  ok "cleared: the first batch file was written on a retry"
else
  bad "cleared: no retry logged for the first batch file"
  grep -E 'iter_0' "$T"/cleared/logs/coordinator*.log | tail -3
fi
grep -q 'not written after' "$T"/cleared/logs/coordinator*.log && bad "cleared: a file was given up" || ok "cleared: no file given up"
exit $fail
