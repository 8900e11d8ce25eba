#!/usr/bin/env bash
# it_security.sh: CURVE and Redis AUTH with real processes (docs/security.md).
#   redis     a redis-server with requirepass and an ACL user: roles without the password exit 1
#             with "redis refused the connection: ..."; with the password or the ACL user they run
#   curve     an env worker with --curve-keys: a client without keys gets nothing back, one with
#             an authorised key gets its OBS, one with a valid but unlisted key is refused (and the
#             refusal is logged); rotation: restarted with a new authorised-keys folder, the new key
#             gets in and the old one is refused
#   plain     without keys, a non-loopback bind logs the one-line warning
#   cancel    a coordinator with --curve-keys: a CANCEL published with the gate's key reaches a bus
#             subscriber and, its group's trajectories not reported, is re-announced by the
#             coordinator (own key) through the proxy; one published with the actor's key is dropped
#   run       `selroll run --curve` on the password-protected Redis: every role over CURVE, the
#             round completes; meanwhile a client without keys gets nothing from the coordinator
#             and a bus subscriber without keys nothing from the bus, one with a key does; a
#             training iteration with --curve (BATCH and WEIGHTS_READY) trains v0 -> v1
set -u
ROOT=$(cd "$(dirname "$0")" && while [ ! -f Makefile ] && [ "$PWD" != / ]; do cd ..; done; pwd)
cd "$ROOT"
S="$ROOT/bin/selroll"
PY=${SELROLL_PYTHON:-/usr/bin/python3}
T=$(mktemp -d /tmp/selroll-it-security-XXXXXX)
fail=0
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.3
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
say() { echo "-- $*"; }
ok() { echo "ok $*"; }
bad() { echo "FAIL $*"; fail=1; }
free_port() { "$PY" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
t0=$(date +%s)

# --- Redis with a password and an ACL user -------------------------------------------------------
RP=$(free_port)
mkdir -p "$T/redis"
redis-server --port "$RP" --bind 127.0.0.1 --dir "$T/redis" --save "" --appendonly no \
  --requirepass s3cret >"$T/redis/log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$RP" -a s3cret --no-auth-warning ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
redis-cli -p "$RP" -a s3cret --no-auth-warning ACL SETUSER roller on '>r0ll' '~*' '&*' '+@all' >/dev/null
NOPASS="redis://127.0.0.1:$RP"
PASS="redis://:s3cret@127.0.0.1:$RP"
ACLU="redis://roller:r0ll@127.0.0.1:$RP"

for role in coordinator env-worker; do
  case $role in
    coordinator) args=(--work-bind tcp://127.0.0.1:0 --bus-pub-bind tcp://127.0.0.1:0 --bus-sub-bind tcp://127.0.0.1:0 --iters 0) ;;
    env-worker) args=(--bind tcp://127.0.0.1:0 --capacity 2) ;;
  esac
  out=$(timeout 10 "$S" "$role" --redis "$NOPASS" --run sec "${args[@]}" 2>&1); rc=$?
  if [ $rc -eq 1 ] && echo "$out" | grep -q "redis refused the connection: NOAUTH" && [ "$(echo "$out" | grep -c .)" -le 2 ]; then
    ok "$role without the password: $(echo "$out" | grep -m1 refused)"
  else
    bad "$role without the password: rc=$rc: $out"
  fi
  out=$(timeout 10 "$S" "$role" --redis "redis://:wrong@127.0.0.1:$RP" --run sec "${args[@]}" 2>&1); rc=$?
  { [ $rc -eq 1 ] && echo "$out" | grep -q "redis refused the connection: WRONGPASS" && ! echo "$out" | grep -q wrong@; } \
    && ok "$role with a wrong password: refused, password not echoed" || bad "$role with a wrong password: rc=$rc: $out"
done
out=$(timeout 20 "$S" coordinator --redis "$PASS" --run sec-pass --work-bind tcp://127.0.0.1:0 \
  --bus-pub-bind tcp://127.0.0.1:0 --bus-sub-bind tcp://127.0.0.1:0 --iters 0 --out "$T/c0" 2>&1); rc=$?
[ $rc -eq 0 ] && ok "coordinator with the password runs" || bad "coordinator with the password: rc=$rc: $out"

# --- CURVE on the env worker ----------------------------------------------------------------------
K="$T/keys"
"$S" keygen "$K" >/dev/null || bad "keygen"
"$S" keygen "$K" --name rogue --authorized "$T/rotated" >/dev/null || bad "keygen --name"
[ "$(stat -c %a "$K/actor.key")" = 600 ] && ok "secret key files are mode 0600" || bad "actor.key mode $(stat -c %a "$K/actor.key")"
[ -f "$K/authorized/actor.pub" ] && [ ! -f "$K/authorized/rogue.pub" ] && [ -f "$T/rotated/rogue.pub" ] \
  || bad "keygen did not lay out the authorised keys as expected"

# probe EP NAME: prints "reply" when a RESET sent with key pair NAME ("none" = no CURVE) is
# answered within 1 s, "silent" otherwise.
probe() {
  "$PY" - "$1" "$2" "$K" <<'PY'
import os, sys, msgpack, zmq
ep, name, kdir = sys.argv[1:4]
def key(path):
    with open(path) as f:
        return [l.strip() for l in f if l.strip() and not l.startswith("#")][0].encode()
ctx = zmq.Context()
s = ctx.socket(zmq.DEALER)
s.setsockopt(zmq.LINGER, 0)
if name != "none":
    sec = key(os.path.join(kdir, name + ".key"))
    s.curve_secretkey = sec
    s.curve_publickey = zmq.curve_public(sec)
    s.curve_serverkey = key(os.path.join(kdir, "server.pub"))
s.connect(ep)
s.send(msgpack.packb({"t": "RESET", "v": 1, "rid": 1, "session": "p", "task": "household/train/1"}))
print("reply" if s.poll(1000) else "silent")
s.close(); ctx.term()
PY
}

# start_envw NAME ARGS...: an env worker on a free port (ENVW_EP, ENVW_PID).
start_envw() {
  local name=$1; shift
  ENVW_EP="tcp://127.0.0.1:$(free_port)"
  "$S" env-worker --bind "$ENVW_EP" --capacity 4 --redis "$ACLU" --run sec --id "$name" "$@" \
    >"$T/$name.log" 2>&1 &
  ENVW_PID=$!
  pids+=("$ENVW_PID")
  for _ in $(seq 100); do grep -q "serving on" "$T/$name.log" && break; sleep 0.05; done
  grep -q "serving on" "$T/$name.log" || bad "$name did not start: $(tail -n 2 "$T/$name.log")"
}

start_envw envw-curve --curve-keys "$K"
ok "env worker with the ACL user and CURVE keys serves"
r=$(probe "$ENVW_EP" actor); [ "$r" = reply ] && ok "authorised client (actor key) gets its OBS" || bad "authorised client: $r"
r=$(probe "$ENVW_EP" none); [ "$r" = silent ] && ok "client without keys gets nothing" || bad "client without keys: $r"
r=$(probe "$ENVW_EP" rogue); [ "$r" = silent ] && ok "client with an unlisted key is refused" || bad "unlisted key: $r"
sleep 0.2
grep -q "curve: refused a peer" "$T/envw-curve.log" && ok "the refusal is logged" || bad "no refusal in the log"
kill "$ENVW_PID"; wait "$ENVW_PID" 2>/dev/null

say "rotation: restart with the rotated authorised-keys folder (rogue only)"
start_envw envw-rotated --curve-keys "$K" --curve-authorized "$T/rotated"
r=$(probe "$ENVW_EP" rogue); [ "$r" = reply ] && ok "rotated: the new key gets in" || bad "rotated new key: $r"
r=$(probe "$ENVW_EP" actor); [ "$r" = silent ] && ok "rotated: the old key is refused" || bad "rotated old key: $r"
kill "$ENVW_PID"; wait "$ENVW_PID" 2>/dev/null

out=$(timeout 10 "$S" env-worker --bind tcp://127.0.0.1:0 --capacity 2 --curve-keys "$T/nowhere" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "curve-keys" && ok "missing keys folder: exit 2, $(echo "$out" | head -n 1)" \
  || bad "missing keys folder: rc=$rc: $out"

# --- without keys: the warning on a non-loopback bind ----------------------------------------------
start_envw envw-plain
r=$(probe "$ENVW_EP" none); [ "$r" = reply ] && ok "without keys, loopback serves plain clients" || bad "plain: $r"
kill "$ENVW_PID"; wait "$ENVW_PID" 2>/dev/null
"$S" env-worker --bind "tcp://0.0.0.0:$(free_port)" --capacity 2 >"$T/wild.log" 2>&1 &
WILD=$!
pids+=("$WILD")
for _ in $(seq 100); do grep -q "serving on" "$T/wild.log" && break; sleep 0.05; done
kill "$WILD"; wait "$WILD" 2>/dev/null
grep -q "unencrypted" "$T/wild.log" && [ "$(grep -c unencrypted "$T/wild.log")" -eq 1 ] \
  && ok "non-loopback bind without keys warns once: $(grep -o 'binding.*' "$T/wild.log" | head -c 90)" \
  || bad "no warning for an unencrypted non-loopback bind"

# --- CANCEL under CURVE: the gate's, forwarded and re-announced; an actor key's, dropped ----------
say "CANCEL under CURVE: the coordinator's re-announcements pass the proxy"
CW=$(free_port); CB1=$(free_port); CB2=$(free_port)
"$S" coordinator --redis "$PASS" --run sec-cancel --curve-keys "$K" --work-bind "tcp://127.0.0.1:$CW" \
  --bus-pub-bind "tcp://127.0.0.1:$CB1" --bus-sub-bind "tcp://127.0.0.1:$CB2" --http off --iters 1 \
  --groups 1 --group-size 4 --lease-ms 10000 --env-workers tcp://127.0.0.1:9 --out "$T/cc" \
  >"$T/cc.log" 2>&1 &
CC_PID=$!
pids+=("$CC_PID")
for _ in $(seq 100); do grep -q "coordinator of run" "$T/cc.log" && break; sleep 0.05; done
cres=$("$PY" - "$CW" "$CB1" "$CB2" "$K" "$RP" <<'PY'
import json, os, subprocess, sys, time, msgpack, zmq
wp, pp, sp, kdir, rp = sys.argv[1:6]
def key(path):
    with open(path) as f:
        return [l.strip() for l in f if l.strip() and not l.startswith("#")][0].encode()
ctx = zmq.Context()
def sock(kind, name):
    s = ctx.socket(kind)
    s.setsockopt(zmq.LINGER, 0)
    sec = key(os.path.join(kdir, name + ".key"))
    s.curve_secretkey = sec
    s.curve_publickey = zmq.curve_public(sec)
    s.curve_serverkey = key(os.path.join(kdir, "server.pub"))
    return s
pk = lambda t, **f: msgpack.packb({"t": t, "v": 1, **f})
sub = sock(zmq.SUB, "actor")
sub.setsockopt(zmq.SUBSCRIBE, b"ctl/sec-cancel/cancel")
sub.connect("tcp://127.0.0.1:" + sp)
d = sock(zmq.DEALER, "actor")
d.setsockopt(zmq.IDENTITY, b"curve-actor")
d.connect("tcp://127.0.0.1:" + wp)
d.send(pk("HELLO", actor_id="curve-actor", role="actor", slots=4, host="it", pid=os.getpid()))
jobs, end = [], time.time() + 10
while len(jobs) < 4 and time.time() < end:
    if d.poll(100):
        m = msgpack.unpackb(d.recv(), raw=False)
        if m["t"] == "WELCOME":
            d.send(pk("CREDIT", credits=4))
        elif m["t"] == "JOB":
            jobs.append(m)  # held: never reported, so the cancel stays pending
gid = jobs[0]["group"] if jobs else "r0000-g0000"
subprocess.run(["redis-cli", "-p", rp, "-a", "s3cret", "--no-auth-warning", "hset",
                "selroll:sec-cancel:group:" + gid, "status", "cancelled"], stdout=subprocess.DEVNULL)
gate, rogue = sock(zmq.PUB, "gate"), sock(zmq.PUB, "actor")
for s in (gate, rogue):
    s.connect("tcp://127.0.0.1:" + pp)
time.sleep(0.5)
topic = b"ctl/sec-cancel/cancel"
rogue.send_multipart([topic, pk("CANCEL", run="sec-cancel", group=gid, step=1, d=0.1, reason="forged")])
gate.send_multipart([topic, pk("CANCEL", run="sec-cancel", group=gid, step=2, d=0.5, reason="converged")])
seen = {"converged": 0, "forged": 0}
end = time.time() + 2.0
while time.time() < end:
    if sub.poll(100):
        _, body = sub.recv_multipart()
        r = msgpack.unpackb(body, raw=False).get("reason")
        seen[r] = seen.get(r, 0) + 1
print(json.dumps({"jobs": len(jobs), **seen}))
PY
)
kill "$CC_PID"; wait "$CC_PID" 2>/dev/null
"$PY" -c 'import json,sys; o=json.loads(sys.argv[1]); sys.exit(0 if o["jobs"] == 4 and o["converged"] >= 3 and o["forged"] == 0 else 1)' "$cres" \
  && ok "CANCEL under CURVE: the gate's seen with the coordinator's re-announcements, the actor key's dropped ($cres)" \
  || bad "CANCEL under CURVE: $cres $(tail -n 3 "$T/cc.log")"
grep -q "a CANCEL from a key that is not the gate's dropped" "$T/cc.log" \
  && ok "CANCEL under CURVE: the proxy logged the dropped one" || bad "CANCEL under CURVE: no drop logged"

# --- selroll run --curve on the password-protected Redis -------------------------------------------
say "selroll run --curve: every role over CURVE"
"$S" run --curve --redis "$PASS" --run sec-run --out "$T/r" --actors 2 --slots 8 --env-workers 1 \
  --groups 4 --group-size 4 --iters 1 --max-steps 20 --time-scale 8 --grace-ms 1000 \
  >"$T/run.out" 2>"$T/run.err" &
RUN_PID=$!
pids+=("$RUN_PID")
for _ in $(seq 400); do grep -qs '^OUT=' "$T/r/endpoints.env" && break; sleep 0.05; done
# shellcheck disable=SC1090
. "$T/r/endpoints.env"
# Bus subscribers: one without keys, one with the actor's key, both listening 2.5 s at once.
sub_count() {
  "$PY" - "$1" "$2" "$K2" <<'PY'
import os, sys, time, zmq
ep, name, kdir = sys.argv[1:4]
def key(path):
    with open(path) as f:
        return [l.strip() for l in f if l.strip() and not l.startswith("#")][0].encode()
ctx = zmq.Context()
s = ctx.socket(zmq.SUB)
s.setsockopt(zmq.LINGER, 0)
if name != "none":
    sec = key(os.path.join(kdir, name + ".key"))
    s.curve_secretkey = sec
    s.curve_publickey = zmq.curve_public(sec)
    s.curve_serverkey = key(os.path.join(kdir, "server.pub"))
# the run's topics: the bus proxy refuses an empty (everything) subscription
s.setsockopt(zmq.SUBSCRIBE, b"act/sec-run/")
s.setsockopt(zmq.SUBSCRIBE, b"ctl/sec-run/")
s.connect(ep)
n, end = 0, time.time() + 2.5
while time.time() < end:
    if s.poll(100):
        s.recv_multipart(); n += 1
print(n)
s.close(); ctx.term()
PY
}
K2="$T/r/keys"
sub_count "$BUS_SUB_EP" none >"$T/sub_none" &
S1=$!
sub_count "$BUS_SUB_EP" actor >"$T/sub_actor" &
S2=$!
K_SAVED=$K; K=$K2
r=$(probe "$WORK_EP" none); [ "$r" = silent ] && ok "run --curve: a client without keys gets nothing from the coordinator" \
  || bad "run --curve: plain client to the coordinator: $r"
K=$K_SAVED
wait "$S1" "$S2"
[ "$(cat "$T/sub_none")" = 0 ] && [ "$(cat "$T/sub_actor")" -gt 0 ] \
  && ok "run --curve: the bus gave a keyless subscriber nothing, an authorised one $(cat "$T/sub_actor") messages" \
  || bad "run --curve: bus subscribers: keyless $(cat "$T/sub_none"), authorised $(cat "$T/sub_actor")"
for _ in $(seq 600); do kill -0 "$RUN_PID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$RUN_PID" 2>/dev/null && { bad "run --curve did not finish in 60 s"; kill "$RUN_PID"; }
wait "$RUN_PID"; rc=$?
line=$(grep '^round 0:' "$T/run.out")
[ $rc -eq 0 ] && echo "$line" | grep -q 'groups 4 (done 4' && ok "run --curve: $line" \
  || bad "run --curve: rc=$rc: $line $(tail -n 3 "$T/run.err")"
[ -f "$T/r/keys/server.key" ] && [ "$(stat -c %a "$T/r/keys/server.key")" = 600 ] \
  && ok "run --curve: keys in <out>/keys" || bad "run --curve: no keys in <out>/keys"
grep -q "curve: refused a peer" "$T/r/logs/coordinator.log" && ok "run --curve: the coordinator logged the refusal" \
  || say "(the keyless probe never reached the ZAP handler: its handshake failed first)"

say "selroll run --curve, training: BATCH and WEIGHTS_READY over CURVE"
"$S" run --curve --redis "$PASS" --run sec-train --out "$T/tr" --iters 1 --batch-groups 2 \
  --group-size 4 --eval-tasks 0 --actors 2 --slots 8 --env-workers 1 --max-steps 15 \
  --grace-ms 1000 >"$T/train.out" 2>"$T/train.err"; rc=$?
line=$(grep '^iter   0' "$T/train.out")
[ $rc -eq 0 ] && echo "$line" | grep -q 'policy v0->v1' && ok "run --curve training: $(echo "$line" | cut -c1-60)" \
  || bad "run --curve training: rc=$rc: $line $(tail -n 3 "$T/train.err")"

say "it_security: $(( $(date +%s) - t0 )) s"
[ $fail -eq 0 ] && echo "it_security: ok" || echo "it_security: FAILED"
exit $fail
