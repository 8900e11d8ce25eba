#!/usr/bin/env bash
# it_cli.sh: every subcommand listed by `selroll --help` answers --help with exit 0 and a usage line;
# an unknown command and no command exit 2 with a one-line error; so does `selroll run` given a run
# name Redis keys cannot carry, or a dashboard address (--http) that is in use, before it starts
# anything.
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
exit $fail
