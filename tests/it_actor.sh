#!/usr/bin/env bash
# it_actor.sh: the `selroll actor` process: --help, one-line errors for bad flags (exit 2), a clear
# line and exit 1 when the coordinator never answers, and a clean exit 0 on SIGTERM and SIGINT.
set -u
cd "$(dirname "$0")/.."
S=bin/selroll
fail=0
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

$S actor --help | grep -q -- '--coordinator' || { echo "actor --help lists no --coordinator"; fail=1; }

out=$($S actor 2>&1); rc=$?
[ $rc -eq 2 ] && [ $(wc -l <<<"$out") -eq 1 ] || { echo "missing --coordinator: rc=$rc out=$out"; fail=1; }
out=$($S actor --coordinator tcp://127.0.0.1:5555 --slots abc 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- '--slots' <<<"$out" || { echo "bad --slots: rc=$rc out=$out"; fail=1; }
out=$($S actor --coordinator nowhere 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q 'coordinator' <<<"$out" || { echo "bad endpoint: rc=$rc out=$out"; fail=1; }
out=$($S actor --coordinator tcp://127.0.0.1:5555 --policy ftp://x 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q 'policy' <<<"$out" || { echo "bad policy URL: rc=$rc out=$out"; fail=1; }

ep="tcp://127.0.0.1:$(free_port)"
out=$($S actor --coordinator "$ep" --welcome-timeout-ms 300 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && grep -q "selroll actor: no WELCOME from the coordinator at $ep" <<<"$out" \
  || { echo "unreachable coordinator: rc=$rc out=$out"; fail=1; }

# catching() tells whether pid catches SIGINT and SIGTERM yet. A background job of this
# non-interactive shell starts with SIGINT ignored: one sent before the actor installs its handler
# would be lost and the wait below would hang, which a fixed sleep allowed on a loaded machine.
catching() { local m; m=$(awk '/^SigCgt:/{print $2}' /proc/$1/status 2>/dev/null) || return 1
  [ -n "$m" ] && (( (16#$m & 0x4002) == 0x4002 )); }
for sig in TERM INT; do
  $S actor --coordinator "$ep" --welcome-timeout-ms 0 --drain-on-term 2>/dev/null &
  pid=$!
  for _ in $(seq 1 100); do catching $pid && break; sleep 0.05; done
  sleep 0.1
  kill -$sig $pid
  wait $pid; rc=$?
  [ $rc -eq 0 ] || { echo "SIG$sig: exit $rc"; fail=1; }
done
[ $fail -eq 0 ] && echo "actor command: help, flag errors, unreachable coordinator, signals ok"
exit $fail
