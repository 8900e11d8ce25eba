#!/usr/bin/env bash
# run_unit.sh BIN...: runs each cmocka test binary with a time limit; with SELROLL_VALGRIND=1 under
# valgrind memcheck (any error or leak fails). cmocka's own lines stay in the log: each binary's
# output is kept whole and printed when it ends. SELROLL_UNIT_JOBS binaries run at once (default:
# the number of cores; 1 under valgrind, whose timing-sensitive cases want the machine to
# themselves). The binaries start longest first, by the times of the last run kept next to them
# (.unit_times in the first binary's folder; a binary without a time starts first), so the jobs
# end together; without that file they start in the order given.
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
times_file=""
[ $# -gt 0 ] && times_file="$(dirname "$1")/.unit_times"
[ "${SELROLL_VALGRIND:-0}" = 1 ] && times_file="" # valgrind's times are of another scale
declare -A took=() # name -> ms, of the last run and then of this one
if [ -n "$times_file" ] && [ -r "$times_file" ]; then
  while read -r n ms; do [[ $ms =~ ^[0-9]+$ ]] && took[$n]=$ms; done <"$times_file"
  mapfile -t order < <(for t in "$@"; do
    n=$(basename "$t"); echo "${took[$n]:-999999999} $t"; done | sort -s -k1,1nr | cut -d' ' -f2-)
  set -- "${order[@]}"
fi

# one BIN: runs it, its output into $out/<name>.log, its exit code into $out/<name>.rc
one() {
  local t=$1 name t0
  name=$(basename "$t")
  t0=$(date +%s%3N)
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
    echo $(($(date +%s%3N) - t0)) >"$out/$name.ms"
  } >"$out/$name.log" 2>&1
}

# report NAME: prints a finished binary's output and counts it
report() {
  local name=$1 rc
  cat "$out/$name.log"
  rc=$(cat "$out/$name.rc" 2>/dev/null || echo 1)
  took[$name]=$(cat "$out/$name.ms" 2>/dev/null || echo 0)
  if [ "$rc" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); failed+=("$name(rc=$rc)"); fi
  rm -f "$out/$name.log" "$out/$name.rc" "$out/$name.ms"
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
if [ -n "$times_file" ]; then
  for n in "${!took[@]}"; do echo "$n ${took[$n]}"; done >"$times_file.$$" 2>/dev/null &&
    mv -f "$times_file.$$" "$times_file" 2>/dev/null
fi
echo "unit: $pass passed, $fail failed"
[ $fail -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
