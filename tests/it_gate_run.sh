#!/usr/bin/env bash
# it_gate_run.sh: the gate and run commands as processes. selroll gate: --help, bad flags exit 2,
# unreachable Redis or coordinator exit 1 with one clear line, SIGTERM exits 0 with a summary of
# its counters, and a real CANCEL through a bus proxy hosted here (python3-zmq) with a group
# recorded in a private redis-server. selroll run: bad flags exit 2; SIGTERM mid-run exits 0,
# leaves no child behind and removes its private redis-server folder.
set -u
ROOT=$(cd "$(dirname "$0")" && while [ ! -f Makefile ] && [ "$PWD" != / ]; do cd ..; done; pwd)
cd "$ROOT"
S="$ROOT/bin/selroll"
PY=${SELROLL_PYTHON:-/usr/bin/python3}
T=$(mktemp -d /tmp/selroll-it-gate-run-XXXXXX)
fail=0
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null && wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
bad() { echo "FAIL $*"; fail=1; }
ok() { echo "ok   $*"; }
free_port() { "$PY" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# --- selroll gate -----------------------------------------------------------------------------
"$S" gate --help | grep -q '^usage: selroll gate' && ok "gate --help" || bad "gate --help"
for args in "--mode maybe --redis redis://x" "--shard 2/2 --bus-sub tcp://a:1 --bus-pub tcp://a:2 --redis redis://x" \
            "--k 0 --coordinator tcp://a:1 --redis redis://x" "--bus-sub tcp://a:1 --redis redis://x" \
            "--coordinator tcp://a:1"; do
  # shellcheck disable=SC2086
  out=$("$S" gate $args 2>&1); rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && ok "gate $args: exit 2, one line" \
    || bad "gate $args: rc=$rc out=$out"
done
out=$("$S" gate --bus-sub tcp://127.0.0.1:1 --bus-pub tcp://127.0.0.1:2 --redis redis://127.0.0.1:1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "unreachable" <<<"$out" && ok "gate: unreachable Redis exits 1" || bad "gate unreachable redis: rc=$rc $out"
out=$("$S" gate --coordinator tcp://127.0.0.1:1 --mode off --welcome-timeout-ms 300 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "did not answer HELLO" <<<"$out" && ok "gate: silent coordinator exits 1" || bad "gate silent coordinator: rc=$rc $out"

RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --dir "$T" --save "" --appendonly no >"$T/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$RPORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
redis-cli -p "$RPORT" HSET selroll:itg:group:r0000-g0000 task household/train/1 iteration 0 G 2 \
  status running finished 0 created_ms 1 ended_ms 0 step -1 d -1 decision "" >/dev/null
PP=$(free_port); SP=$(free_port)
"$S" gate --bus-pub "tcp://127.0.0.1:$PP" --bus-sub "tcp://127.0.0.1:$SP" --redis "redis://127.0.0.1:$RPORT" \
  --run itg --k 2 >"$T/gate.log" 2>&1 &
GATE=$!; pids+=("$GATE")
"$PY" - "$PP" "$SP" <<'PY' && ok "gate: converged group cancelled over a real bus" || bad "gate: no CANCEL"
import sys, threading, time, msgpack, zmq
pp, sp = sys.argv[1], sys.argv[2]
ctx = zmq.Context()
xsub = ctx.socket(zmq.XSUB); xsub.bind("tcp://127.0.0.1:%s" % pp)
xpub = ctx.socket(zmq.XPUB); xpub.bind("tcp://127.0.0.1:%s" % sp)
threading.Thread(target=lambda: zmq.proxy(xsub, xpub), daemon=True).start()
sub = ctx.socket(zmq.SUB); sub.connect("tcp://127.0.0.1:%s" % sp); sub.setsockopt(zmq.SUBSCRIBE, b"ctl/itg/")
pub = ctx.socket(zmq.PUB); pub.connect("tcp://127.0.0.1:%s" % pp)
time.sleep(1.0)  # the gate's subscription reaches the proxy
pub.send_multipart([b"act/itg/x", b"\xc1 junk"])
for t in range(2):
    for k in (1, 2):
        pub.send_multipart([b"act/itg/r0000-g0000", msgpack.packb({"t": "ACTION", "v": 1, "run": "itg",
            "group": "r0000-g0000", "traj": t, "step": k, "action": "look", "ended": False,
            "reward": 0.0, "group_size": 2})])
if not sub.poll(5000):
    sys.exit(1)
topic, body = sub.recv_multipart()
m = msgpack.unpackb(body, raw=False)
sys.exit(0 if m["t"] == "CANCEL" and m["group"] == "r0000-g0000" and m["step"] == 2 else 1)
PY
st=$(redis-cli -p "$RPORT" HGET selroll:itg:group:r0000-g0000 status)
dec=$(redis-cli -p "$RPORT" HGET selroll:itg:group:r0000-g0000 decision)
[ "$st" = cancelled ] && [ "$dec" = cancel ] && ok "gate: Redis says cancelled / cancel" || bad "gate: Redis status=$st decision=$dec"
kill -TERM "$GATE"; wait "$GATE"; rc=$?
[ $rc -eq 0 ] && ok "gate: SIGTERM exits 0" || bad "gate: SIGTERM rc=$rc"
grep -q "1 CANCELs sent.* 1 bad messages" "$T/gate.log" && ok "gate: summary counts the CANCEL and the bad message" \
  || bad "gate: summary: $(tail -1 "$T/gate.log")"

# --- selroll run -------------------------------------------------------------------------------
"$S" run --help | grep -q '^usage: selroll run' && ok "run --help" || bad "run --help"
for args in "--gate-mode maybe" "--placement far" "--actors 0" "--bus-external nocomma"; do
  # shellcheck disable=SC2086
  out=$("$S" run --out "$T/bad" $args 2>&1); rc=$?
  [ $rc -eq 2 ] && ok "run $args: exit 2" || bad "run $args: rc=$rc $out"
done
"$S" run --out "$T/r" --run itr --grace-ms 1000 >"$T/run.out" 2>"$T/run.err" &
RUN=$!; pids+=("$RUN")
for _ in $(seq 100); do [ -f "$T/r/endpoints.env" ] && break; sleep 0.05; done
sleep 0.5
rdir=$(grep -o '/tmp/selroll-redis-[A-Za-z0-9]*' "$T/run.err" | head -1)
[ -n "$rdir" ] && [ -d "$rdir" ] && ok "run: private redis-server folder $rdir" || bad "run: no private redis folder"
kids=$(awk '{print $2}' "$T/r/children.txt" 2>/dev/null)
kill -TERM "$RUN"; wait "$RUN"; rc=$?
[ $rc -eq 0 ] && ok "run: SIGTERM exits 0" || bad "run: SIGTERM rc=$rc"
left=""; for k in $kids; do kill -0 "$k" 2>/dev/null && left="$left $k"; done
[ -z "$left" ] && [ -n "$kids" ] && ok "run: no child left behind ($(wc -w <<<"$kids") children)" || bad "run: children left:$left"
[ -n "$rdir" ] && [ ! -d "$rdir" ] && ok "run: private redis folder removed" || bad "run: $rdir still there"
exit $fail
