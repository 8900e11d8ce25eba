#!/usr/bin/env bash
# it_gate_run.sh: the gate and run commands as processes. selroll gate: --help, bad flags exit 2,
# a malformed Redis URL, a wrong Redis password or a silent coordinator exit 1 with one clear
# line, SIGTERM exits 0 with a summary of its counters, a real CANCEL through a bus proxy hosted
# here (python3-zmq) with a group recorded in a private redis-server, and a gate started while its
# Redis is down: it keeps running and deciding, and once a redis-server is started on that port
# its decision lands there and its CANCEL goes out. selroll run: bad flags exit 2; SIGTERM mid-run exits 0,
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
out=$("$S" gate --bus-sub tcp://127.0.0.1:1 --bus-pub tcp://127.0.0.1:2 --redis redis:/127.0.0.1 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && ok "gate: malformed Redis URL exits 1, one line" || bad "gate malformed redis URL: rc=$rc $out"
APORT=$(free_port)
redis-server --port "$APORT" --bind 127.0.0.1 --dir "$T" --save "" --appendonly no --requirepass right >"$T/redis-auth.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$APORT" -a right --no-auth-warning ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
out=$(timeout 10 "$S" gate --bus-sub tcp://127.0.0.1:1 --bus-pub tcp://127.0.0.1:2 --redis "redis://:wrong@127.0.0.1:$APORT" 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "refused" <<<"$out" && ok "gate: a wrong Redis password exits 1, one line" \
  || bad "gate wrong password: rc=$rc $out"
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

# --- selroll gate started while its Redis is down ------------------------------------------------
# The Redis to come holds the group already (an RDB made here first), so that the gate's decision,
# made while Redis is down, finds it the moment Redis answers.
DPORT=$(free_port); mkdir -p "$T/rdb"
redis-server --port "$DPORT" --bind 127.0.0.1 --dir "$T/rdb" --dbfilename dump.rdb --save "" --appendonly no >"$T/redis-d0.log" 2>&1 &
D0=$!; pids+=("$D0")
for _ in $(seq 100); do redis-cli -p "$DPORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
redis-cli -p "$DPORT" HSET selroll:itd:group:r0000-g0000 task household/train/1 iteration 0 G 2 \
  status running finished 0 created_ms 1 ended_ms 0 step -1 d -1 decision "" >/dev/null
redis-cli -p "$DPORT" SAVE >/dev/null; kill -TERM "$D0"; wait "$D0" 2>/dev/null
for _ in $(seq 100); do redis-cli -p "$DPORT" ping >/dev/null 2>&1 || break; sleep 0.1; done
[ -s "$T/rdb/dump.rdb" ] || bad "gate/down: no RDB made"
PP=$(free_port); SP=$(free_port)
"$S" gate --bus-pub "tcp://127.0.0.1:$PP" --bus-sub "tcp://127.0.0.1:$SP" --redis "redis://127.0.0.1:$DPORT" \
  --run itd --k 2 >"$T/gate-down.log" 2>&1 &
GATE=$!; pids+=("$GATE")
"$PY" - "$PP" "$SP" "$DPORT" "$T" "$GATE" <<'PY' && ok "gate/down: decided while Redis was down, CANCEL once Redis answered" || bad "gate/down: see above"
import os, subprocess, sys, threading, time, msgpack, zmq
pp, sp, dport, tdir, gate = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
ctx = zmq.Context()
xsub = ctx.socket(zmq.XSUB); xsub.bind("tcp://127.0.0.1:%s" % pp)
xpub = ctx.socket(zmq.XPUB); xpub.bind("tcp://127.0.0.1:%s" % sp)
threading.Thread(target=lambda: zmq.proxy(xsub, xpub), daemon=True).start()
sub = ctx.socket(zmq.SUB); sub.connect("tcp://127.0.0.1:%s" % sp); sub.setsockopt(zmq.SUBSCRIBE, b"ctl/itd/")
pub = ctx.socket(zmq.PUB); pub.connect("tcp://127.0.0.1:%s" % pp)
time.sleep(1.0)  # the gate's subscription reaches the proxy
def alive():
    try:
        os.kill(gate, 0); return True
    except OSError:
        return False
if not alive():
    print("FAIL gate/down: the gate exited with Redis down"); sys.exit(1)
for t in range(2):
    for k in (1, 2):
        pub.send_multipart([b"act/itd/r0000-g0000", msgpack.packb({"t": "ACTION", "v": 1, "run": "itd",
            "group": "r0000-g0000", "traj": t, "step": k, "action": "look", "ended": False,
            "reward": 0.0, "group_size": 2})])
# No CANCEL without Redis: the gate publishes one only for a cancel recorded there.
if sub.poll(1500):
    print("FAIL gate/down: CANCEL published while Redis was down"); sys.exit(1)
if not alive():
    print("FAIL gate/down: the gate exited after deciding with Redis down"); sys.exit(1)
t0 = time.monotonic()
r = subprocess.Popen(["redis-server", "--port", dport, "--bind", "127.0.0.1", "--dir", tdir + "/rdb",
                      "--dbfilename", "dump.rdb", "--save", "", "--appendonly", "no"],
                     stdout=open(tdir + "/redis-d1.log", "w"), stderr=subprocess.STDOUT)
open(tdir + "/redis-d1.pid", "w").write(str(r.pid))
if not sub.poll(10000):
    print("FAIL gate/down: no CANCEL within 10 s of Redis starting"); sys.exit(1)
topic, body = sub.recv_multipart()
m = msgpack.unpackb(body, raw=False)
if not (m["t"] == "CANCEL" and m["group"] == "r0000-g0000" and m["step"] == 2):
    print("FAIL gate/down: unexpected %r" % m); sys.exit(1)
print("     gate/down: CANCEL %.2f s after redis-server was started" % (time.monotonic() - t0))
PY
[ -f "$T/redis-d1.pid" ] && pids+=("$(cat "$T/redis-d1.pid")")
st=$(redis-cli -p "$DPORT" HGET selroll:itd:group:r0000-g0000 status)
dec=$(redis-cli -p "$DPORT" HGET selroll:itd:group:r0000-g0000 decision)
[ "$st" = cancelled ] && [ "$dec" = cancel ] && ok "gate/down: Redis says cancelled / cancel" || bad "gate/down: Redis status=$st decision=$dec"
for _ in $(seq 50); do [ "$(redis-cli -p "$DPORT" HGET selroll:itd:gate:stats mode)" = enforce ] && break; sleep 0.1; done
[ "$(redis-cli -p "$DPORT" HGET selroll:itd:gate:stats mode)" = enforce ] && ok "gate/down: its configuration recorded once Redis answered" \
  || bad "gate/down: gate:stats has no mode"
kill -TERM "$GATE"; wait "$GATE"; rc=$?
[ $rc -eq 0 ] && ok "gate/down: SIGTERM exits 0" || bad "gate/down: SIGTERM rc=$rc"
nd=$(grep -c "Redis does not answer" "$T/gate-down.log"); na=$(grep -c "Redis answers" "$T/gate-down.log")
[ "$nd" -eq 1 ] && [ "$na" -eq 1 ] && ok "gate/down: one log line for Redis down, one for Redis back" \
  || { bad "gate/down: $nd 'does not answer' and $na 'answers' lines"; cat "$T/gate-down.log"; }
grep -q "1 CANCELs sent" "$T/gate-down.log" && ok "gate/down: summary counts the CANCEL" || bad "gate/down: summary: $(tail -1 "$T/gate-down.log")"
# A wrong password only shows once Redis answers: then the gate stops (exit 1, the refusal said).
WPORT=$(free_port)
"$S" gate --bus-pub "tcp://127.0.0.1:$PP" --bus-sub "tcp://127.0.0.1:$SP" --redis "redis://:wrong@127.0.0.1:$WPORT" \
  --run itd --k 2 >"$T/gate-pw.log" 2>&1 &
GATE=$!; pids+=("$GATE")
sleep 0.5
kill -0 "$GATE" 2>/dev/null && ok "gate/refused later: runs while its Redis is down" || bad "gate/refused later: exited with Redis down"
redis-server --port "$WPORT" --bind 127.0.0.1 --dir "$T" --save "" --appendonly no --requirepass right >"$T/redis-pw.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do kill -0 "$GATE" 2>/dev/null || break; sleep 0.05; done
wait "$GATE"; rc=$?
[ $rc -eq 1 ] && grep -q "selroll gate: redis refused the connection" "$T/gate-pw.log" \
  && ok "gate/refused later: exits 1 once Redis answers with the refusal" || { bad "gate/refused later: rc=$rc"; cat "$T/gate-pw.log"; }

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
