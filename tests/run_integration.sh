#!/usr/bin/env bash
# run_integration.sh [SCRIPT...]: runs the given integration scripts, or every tests/it_*.sh (real
# processes, real sockets, private redis-server), with a time limit each. Each script exits 0 on
# success and prints what it checked; a script that cannot run on this machine (e.g. no network
# namespaces) prints "SKIP: why" and exits 77: it is reported as skipped, never counted as passed.
# The limit is SELROLL_IT_TIMEOUT seconds (default 600), or a script's own "# time limit: N s" line
# when SELROLL_IT_TIMEOUT is not set.
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0; failed=(); skip=0; skipped=()
limit=${SELROLL_IT_TIMEOUT:-600}
[ $# -gt 0 ] || set -- tests/it_*.sh
for t in "$@"; do
  [ -e "$t" ] || continue
  name=$(basename "$t" .sh)
  echo "== $name"
  own=$(sed -n 's/^# time limit: \([0-9][0-9]*\) s$/\1/p' "$t" | head -n 1)
  this=$limit
  [ -n "${SELROLL_IT_TIMEOUT:-}" ] || [ -z "$own" ] || this=$own
  timeout "$this" bash "$t"
  rc=$?
  if [ $rc -eq 0 ]; then pass=$((pass + 1)); echo "ok $name"
  elif [ $rc -eq 77 ]; then skip=$((skip + 1)); skipped+=("$name"); echo "SKIP $name"; else fail=$((fail + 1)); failed+=("$name(rc=$rc)"); echo "FAIL $name (rc=$rc)"; fi
done
echo "integration: $pass passed, $fail failed, $skip skipped"
[ $skip -eq 0 ] || echo "skipped: ${skipped[*]}"
[ $fail -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
