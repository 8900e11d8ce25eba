#!/usr/bin/env bash
# run.sh MODE SECONDS BIN...: runs each libFuzzer target for SECONDS on its corpus
# tests/fuzz/corpus/<target>/ and prints one line per target: run length, executions, executions
# per second and the result. MODE "short" (make fuzz-short, part of make test) keeps the seed
# corpus as it is; MODE "long" (make fuzz) merges the inputs that found new coverage into it.
# A crash fails the run; its input is kept under build/fuzz/crashes/ for the regression test.
set -u
mode=$1; secs=$2; shift 2
cd "$(dirname "$0")/../.."
fail=0
mkdir -p build/fuzz/crashes
for bin in "$@"; do
  name=$(basename "$bin")
  corpus="tests/fuzz/corpus/$name"
  mkdir -p "$corpus"
  work=$(mktemp -d "/tmp/selroll-fuzz-$name-XXXXXX")
  log="build/fuzz/$name.log"
  "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=1024 -print_final_stats=1 \
    -artifact_prefix="build/fuzz/crashes/$name-" "$work" "$corpus" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  if [ $rc -eq 0 ]; then
    result="no crash"
  else
    result="FAILED (rc=$rc): $(grep -m1 -E 'ERROR|SUMMARY|deadly signal' "$log")"
    fail=1
  fi
  echo "fuzz $name: ${secs} s, ${runs:-?} runs, ${eps:-?} exec/s, $result"
  if [ $rc -eq 0 ] && [ "$mode" = long ] && [ -n "$(ls -A "$work")" ]; then
    "$bin" -merge=1 "$corpus" "$work" >>"$log" 2>&1
  fi
  rm -rf "$work"
done
[ $fail -eq 0 ] || { echo "fuzz: a target failed; see build/fuzz/*.log and build/fuzz/crashes/"; exit 1; }
