#!/usr/bin/env bash
# profile_policy.sh [--tokens off|completion] [--bin PATH] [--out DIR]: the built-in policy
# server's instructions per request (docs/performance.md, "The step path: the policy server").
#
# Starts `selroll policy-server --no-cost-model` under valgrind's callgrind on a free loopback port,
# zeroes its counters once it answers /health (start-up is not counted), drives it with a short
# `selroll run --policy URL` (4 groups of 8, 2 actors x 16 slots, seed 1: the same 713 requests
# every time), stops it, and prints Ir per answered request and the top functions. Instruction
# counts do not depend on what else the machine runs. Needs valgrind and curl.
set -u
tokens=off
bin=$(cd "$(dirname "$0")/.." && pwd)/bin/selroll
out=
while [ $# -gt 0 ]; do
  case $1 in
    --tokens) tokens=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "profile_policy.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null && command -v curl >/dev/null ||
  { echo "profile_policy.sh: needs valgrind and curl" >&2; exit 2; }
[ -x "$bin" ] || { echo "profile_policy.sh: no program at $bin" >&2; exit 2; }
[ -n "$out" ] || out=$(mktemp -d /tmp/selroll-profile.XXXXXX)
mkdir -p "$out"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" \
  "$bin" policy-server --no-cost-model --listen "127.0.0.1:$port" >"$out/server.log" 2>&1 &
vp=$!
up=0
for _ in $(seq 200); do
  curl -s "http://127.0.0.1:$port/health" >/dev/null && { up=1; break; }
  sleep 0.1
done
[ $up = 1 ] || { echo "profile_policy.sh: the policy server did not start ($out/server.log)" >&2; kill $vp; exit 1; }
callgrind_control -z $vp >/dev/null 2>&1
"$bin" run --policy "http://127.0.0.1:$port" --groups 4 --group-size 8 --iters 1 --actors 2 \
  --slots 16 --env-workers 1 --no-cost-model --tokens "$tokens" --out "$out/run" >"$out/run.log" 2>&1
rc=$?
n=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^selroll_policy_requests_total\{outcome="ok"\}/ {print $2}')
kill -TERM $vp
wait $vp
if [ $rc != 0 ] || [ -z "$n" ] || [ "$n" = 0 ]; then
  echo "profile_policy.sh: the run failed (rc $rc, $out/run.log)" >&2
  exit 1
fi
ir=$(awk '/^summary:/ {print $2}' "$out/callgrind.out")
echo "policy server, tokens $tokens: $n requests, $ir Ir, $((ir / n)) Ir per request ($out/callgrind.out)"
callgrind_annotate --threshold=100 "$out/callgrind.out" 2>/dev/null |
  awk '/file:function/ {p = 1; next} p && NF' | sed -n '8,27p'
