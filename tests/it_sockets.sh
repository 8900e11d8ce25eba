#!/usr/bin/env bash
# it_sockets.sh: selroll run --sockets unix. A bad value exits 2 with one line; a short rollout run
# with its children's channels on Unix sockets finishes with every trajectory done, its children
# reach the private redis-server on a Unix socket (REDIS_URL in OUT/endpoints.env is unix://), and
# the private socket folder is gone afterwards.
set -u
ROOT=$(cd "$(dirname "$0")" && while [ ! -f Makefile ] && [ "$PWD" != / ]; do cd ..; done; pwd)
cd "$ROOT"
S="$ROOT/bin/selroll"
T=$(mktemp -d /tmp/selroll-it-sockets-XXXXXX)
fail=0
cleanup() { rm -rf "$T"; }
trap cleanup EXIT
bad() { echo "FAIL $*"; fail=1; }
ok() { echo "ok   $*"; }

out=$("$S" run --sockets pipes --groups 1 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && ok "run --sockets pipes: exit 2, one line" \
  || bad "run --sockets pipes: rc=$rc out=$out"

out="$T/unix"
timeout 120 "$S" run --run itsock --out "$out" --sockets unix --groups 4 --iters 2 --actors 2 \
  --slots 16 --env-workers 2 --no-cost-model --http off >"$T/run.out" 2>"$T/run.err"
rc=$?
[ $rc -eq 0 ] && ok "run --sockets unix finished" || { bad "run --sockets unix exited $rc"; tail -5 "$T/run.err"; }
n=$(cat "$out"/rounds/round-*.jsonl 2>/dev/null | grep -c '"status":"done"\|"status":"truncated"')
[ "$n" -eq 64 ] && ok "every trajectory of 2 rounds x 4 groups x 8 ended (done or truncated)" \
  || bad "$n of 64 trajectories done or truncated: $(grep -ho '"status":"[a-z]*"' "$out"/rounds/*.jsonl | sort | uniq -c)"
url=$(sed -n 's/^REDIS_URL=//p' "$out/endpoints.env")
sock=${url#unix://}
[[ $url == unix:///tmp/selroll-sock-*/redis.sock ]] && ok "the children reached Redis at $url" \
  || bad "REDIS_URL=$url"
[ -n "$sock" ] && [ ! -e "$(dirname "$sock")" ] && ok "the socket folder is gone" \
  || bad "the socket folder $(dirname "$sock") is still there"
exit $fail
