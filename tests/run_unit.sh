#!/usr/bin/env bash
# run_unit.sh BIN...: runs each cmocka test binary with a time limit; with SELROLL_VALGRIND=1 under
# valgrind memcheck (any error or leak fails). cmocka's own lines stay in the log.
set -u
pass=0; fail=0; failed=()
limit=${SELROLL_TEST_TIMEOUT:-120}
# In a sanitizer build (make SANITIZE=address,undefined: build-san/) an UndefinedBehaviorSanitizer
# report stops the test with an error (the build also has -fno-sanitize-recover=undefined).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
for t in "$@"; do
  name=$(basename "$t")
  if [ "${SELROLL_VALGRIND:-0}" = 1 ]; then
    echo "== $name (valgrind)"
    timeout $((limit * 4)) valgrind -q --fair-sched=yes --leak-check=full --show-leak-kinds=definite,indirect \
      --errors-for-leak-kinds=definite,indirect --error-exitcode=99 "$t"
  else
    echo "== $name"
    timeout "$limit" "$t"
  fi
  rc=$?
  if [ $rc -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); failed+=("$name(rc=$rc)"); fi
done
echo "unit: $pass passed, $fail failed"
[ $fail -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
