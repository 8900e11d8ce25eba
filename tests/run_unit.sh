#!/usr/bin/env bash
# run_unit.sh BIN...: runs each cmocka test binary with a time limit; with SELROLL_VALGRIND=1 under
# valgrind memcheck (any error or leak fails). cmocka's own lines stay in the log: each binary's
# output is kept whole and printed when it ends. SELROLL_UNIT_JOBS binaries run at once (default:
# the number of cores; 1 under valgrind, whose timing-sensitive cases want the machine to
# themselves).
set -u
pass=0; fail=0; failed=()
limit=${SELROLL_TEST_TIMEOUT:-120}
# In a sanitizer build (make SANITIZE=address,undefined: build-san/) an UndefinedBehaviorSanitizer
# report stops the test with an error (the build also has -fno-sanitize-recover=undefined).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
if [ "${SELROLL_VALGRIND:-0}" = 1 ]; then
  jobs=${SELROLL_UNIT_JOBS:-1}
else
  jobs=${SELROLL_UNIT_JOBS:-$(nproc 2>/dev/null || echo 1)}
fi
case $jobs in '' | *[!0-9]* | 0) echo "run_unit.sh: SELROLL_UNIT_JOBS must be a whole number >= 1" >&2; exit 2 ;; esac
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# one BIN: runs it, its output into $out/<name>.log, its exit code into $out/<name>.rc
one() {
  local t=$1 name
  name=$(basename "$t")
  {
    if [ "${SELROLL_VALGRIND:-0}" = 1 ]; then
      echo "== $name (valgrind)"
      timeout $((limit * 4)) valgrind -q --fair-sched=yes --leak-check=full --show-leak-kinds=definite,indirect \
        --errors-for-leak-kinds=definite,indirect --error-exitcode=99 "$t"
    else
      echo "== $name"
      timeout "$limit" "$t"
    fi
    echo $? >"$out/$name.rc"
  } >"$out/$name.log" 2>&1
}

# report NAME: prints a finished binary's output and counts it
report() {
  local name=$1 rc
  cat "$out/$name.log"
  rc=$(cat "$out/$name.rc" 2>/dev/null || echo 1)
  if [ "$rc" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); failed+=("$name(rc=$rc)"); fi
  rm -f "$out/$name.log" "$out/$name.rc"
}

declare -A running=() # pid -> name
for t in "$@"; do
  while [ ${#running[@]} -ge "$jobs" ]; do
    wait -n 2>/dev/null
    for pid in "${!running[@]}"; do
      if ! kill -0 "$pid" 2>/dev/null; then wait "$pid" 2>/dev/null; report "${running[$pid]}"; unset "running[$pid]"; fi
    done
  done
  one "$t" &
  running[$!]=$(basename "$t")
done
for pid in "${!running[@]}"; do
  wait "$pid" 2>/dev/null
  report "${running[$pid]}"
done
echo "unit: $pass passed, $fail failed"
[ $fail -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
