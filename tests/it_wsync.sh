#!/usr/bin/env bash
# it_wsync.sh: the coordinator's --weights-sync against two stub inference servers that implement
# vLLM's load/unload endpoints (one answers 0.6 s late): after the external example trainer's
# WEIGHTS_READY {version, path}, both servers are told to load lora-v<N> from that path and
# POLICY_VERSION is published only after both confirmed; with --keep-versions 1 the previous
# adapter is unloaded; SGLang's update_weights_from_disk takes the path; while a slow server loads
# nothing starts; a server that refuses
# stops the run with exit 1 and one line naming it; without --policy-servers the servers are the
# Redis registry's (selroll:<run>:policy:<id> hashes with an url field), and with none there the
# first WEIGHTS_READY stops the run.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
T=$tmp
"$PY" -c 'import zmq, msgpack' 2>/dev/null || { echo "skip it_wsync: python3-zmq or msgpack missing"; exit 0; }

# stub NAME ARGS...: starts a stub server; sets SP (its port) and SLOG (its log).
stub() {
  local name=$1; shift
  SLOG="$T/$name.log"
  "$PY" tests/stub_openai.py --log "$SLOG" --port-file "$T/$name.port" "$@" 2>"$T/$name.err" &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$T/$name.port" ] && break; sleep 0.05; done
  SP=$(cat "$T/$name.port" 2>/dev/null)
  wait_port "$SP" || { bad "$name: the stub did not start"; exit 1; }
}

# train NAME ITERS COORD-ARGS [run]: selroll run with docs/examples/trainer.py (paths
# /ckpt/<name>/v<N>); COORD-ARGS go through --coordinator-args, or with "run" are selroll run's own
# flags; sets OUT and RC.
train() {
  local name=$1 iters=$2 cargs=$3 how=${4:-coord}
  local extra=(--coordinator-args "$cargs")
  # shellcheck disable=SC2206
  [ "$how" = run ] && extra=($cargs)
  p1=$(free_port); p2=$(free_port)
  # The rollouts come from the built-in policy server, which serves a version only with weights in
  # Redis: the example trainer carries them over to the version it acks (--redis).
  "$PY" docs/examples/trainer.py --pull "tcp://127.0.0.1:$p1" --push "tcp://127.0.0.1:$p2" \
    --run "$name" --path "/ckpt/$name/v{version}" --redis "$RURL" >"$T/$name.trainer" 2>&1 &
  pids+=($!)
  OUT="$T/$name"
  timeout 120 "$S" run --run "$name" --out "$OUT" --iters "$iters" --batch-groups 1 --group-size 4 \
    --max-steps 15 --eval-tasks 0 --actors 1 --slots 8 --env-workers 1 --no-gate --http off \
    --grace-ms 1000 --trainer "tcp://127.0.0.1:$p1,tcp://127.0.0.1:$p2" --redis "$RURL" \
    "${extra[@]}" >"$T/$name.out" 2>"$T/$name.err"
  RC=$?
}

it_redis_start

# --- vLLM LoRA: two servers, published after both confirmed, the old adapter unloaded ------------
stub a --flavor vllm; A=$SP; ALOG=$SLOG
stub b --flavor vllm --load-delay-ms 600; B=$SP; BLOG=$SLOG
train wsv 2 "--weights-sync vllm-lora --policy-servers http://127.0.0.1:$A,http://127.0.0.1:$B --lora-name lora-v{version} --keep-versions 1"
if [ $RC -eq 0 ]; then
  out=$("$PY" - "$ALOG" "$BLOG" "$OUT/logs/coordinator.log" <<'PYEOF'
import json, re, sys, datetime
def need(c, what):
    if not c:
        print("FAIL vllm-lora: " + what); sys.exit(1)
logs = [[json.loads(l) for l in open(f)] for f in sys.argv[1:3]]
for log in logs:
    loads = [q for q in log if q.get("admin") == "/v1/load_lora_adapter"]
    need([q["body"] for q in loads] == [{"lora_name": "lora-v%d" % v, "lora_path": "/ckpt/wsv/v%d" % v}
                                       for v in (1, 2)], "loads: %s" % [q["body"] for q in loads])
    unl = [q["body"] for q in log if q.get("admin") == "/v1/unload_lora_adapter"]
    need(unl == [{"lora_name": "lora-v1"}], "unloads: %s" % unl)
coord = open(sys.argv[3]).read().splitlines()
def when(pat):
    for l in coord:
        if re.search(pat, l):
            return datetime.datetime.strptime(l[:23], "%Y-%m-%dT%H:%M:%S.%f").timestamp()
    need(False, "no log line %r" % pat)
for v in (1, 2):
    ready = when("trainer ready with version %d" % v)
    loaded = [when("weights sync: http://127.0.0.1:%s loaded version %d" % (p, v)) for p in sys.argv[4:6]] \
        if len(sys.argv) > 4 else []
    last = max(q["t1"] for log in logs for q in log
               if q.get("body") == {"lora_name": "lora-v%d" % v, "lora_path": "/ckpt/wsv/v%d" % v})
    need(ready >= last - 0.05, "version %d published %.3f s before the last server confirmed" % (v, last - ready))
    asked = when("asked 2 servers to load version %d" % v)
    need(ready - asked >= 0.55, "version %d published %.3f s after asking, the slow server takes 0.6 s" % (v, ready - asked))
print("ok   vllm-lora: 2 servers loaded lora-v1 and lora-v2 from the trainer's paths before each "
      "version was published; lora-v1 unloaded after v2")
PYEOF
)
  echo "$out"; [[ $out == ok* ]] || fail=1
else
  bad "vllm-lora: selroll run exit $RC: $(tail -3 "$T/wsv.err")"
fi

# --- SGLang update_weights_from_disk --------------------------------------------------------------
stub c --flavor sglang; C=$SP; CLOG=$SLOG
train wsd 1 "--weights-sync sglang-disk --policy-servers http://127.0.0.1:$C" run
if [ $RC -eq 0 ] && grep -q '"admin": "/update_weights_from_disk", "body": {"model_path": "/ckpt/wsd/v1"}' "$CLOG" &&
   grep -q "trainer ready with version 1" "$OUT/logs/coordinator.log"; then
  ok "sglang-disk (selroll run's flags): update_weights_from_disk with the trainer's path, then version 1 published"
else
  bad "sglang-disk: rc=$RC $(tail -2 "$T/wsd.err") $(tail -2 "$CLOG")"
fi

# --- a slow load: nothing starts while the servers load (no wave into a batch already sent, no
# resend of it when the pool runs dry, so no second WEIGHTS_READY and no second load) -------------
stub s --flavor sglang --load-delay-ms 1500; SS=$SP; SSLOG=$SLOG
train wss 2 "--weights-sync sglang-disk --policy-servers http://127.0.0.1:$SS --tasks 4" run
out=$("$PY" - "$OUT/logs/coordinator.log" "$SSLOG" <<'PYEOF'
import json, re, sys
coord = open(sys.argv[1]).read().splitlines()
loads = [q["body"]["model_path"] for q in map(json.loads, open(sys.argv[2])) if q.get("admin") == "/update_weights_from_disk"]
if loads != ["/ckpt/wss/v1", "/ckpt/wss/v2"]:
    print("FAIL slow load: the server was asked to load %s" % loads); sys.exit(1)
loading = False
for l in coord:
    if "weights sync: asked 1 server to load version" in l:
        loading = True
    elif re.search("trainer ready with version", l):
        loading = False
    elif loading and re.search("wave [0-9]+ starts|left no prompt|sending the batch once more", l):
        print("FAIL slow load: while the server loaded: " + l[24:]); sys.exit(1)
print("ok   slow load (1.5 s, a pool of 4 prompts): nothing started while the server loaded; versions 1 and 2 each loaded once")
PYEOF
)
if [ $RC -eq 0 ] && [[ $out == ok* ]]; then echo "$out"; else bad "slow load: rc=$RC $out $(tail -2 "$T/wss.err")"; fi

# --- a server that refuses: the run stops with one line naming it ---------------------------------
stub d --flavor vllm --refuse-load; D=$SP
train wsr 2 "--weights-sync vllm-lora --policy-servers http://127.0.0.1:$A,http://127.0.0.1:$D"
line=$(grep -h "did not load version 1" "$T/wsr.err" "$OUT/logs/coordinator.log" | head -1)
if [ $RC -eq 1 ] && grep -q "http://127.0.0.1:$D did not load version 1: HTTP 400: Loading lora selroll-policy-v1 failed" <<<"$line" &&
   ! grep -q "trainer ready with version 1" "$OUT/logs/coordinator.log"; then
  ok "refusing server: exit 1, version 1 never published: ${line#*ERROR }"
else
  bad "refusing server: rc=$RC line='$line' $(tail -2 "$T/wsr.err")"
fi

# --- servers from the Redis registry: no --policy-servers, two hashes selroll:<run>:policy:<id> ----
# (the run's Redis is the one train() gives every run, started above)
stub e --flavor vllm; E=$SP; ELOG=$SLOG
stub f --flavor vllm --load-delay-ms 300; F=$SP; FLOG=$SLOG
$R HSET selroll:wsq:policy:e url "http://127.0.0.1:$E" >/dev/null
$R PEXPIRE selroll:wsq:policy:e 120000 >/dev/null
$R HSET selroll:wsq:policy:f url "http://127.0.0.1:$F" model lora >/dev/null
$R PEXPIRE selroll:wsq:policy:f 120000 >/dev/null
train wsq 1 "--weights-sync vllm-lora" run
out=$("$PY" - "$ELOG" "$FLOG" "$OUT/logs/coordinator.log" <<'PYEOF'
import json, re, sys, datetime
coord = open(sys.argv[3]).read().splitlines()
def when(pat):
    for l in coord:
        if re.search(pat, l):
            return datetime.datetime.strptime(l[:23], "%Y-%m-%dT%H:%M:%S.%f").timestamp()
    print("FAIL registry: no log line %r" % pat); sys.exit(1)
ready = when("trainer ready with version 1")
when("2 policy server\\(s\\) from Redis")
for f in sys.argv[1:3]:
    loads = [q for q in map(json.loads, open(f)) if q.get("admin") == "/v1/load_lora_adapter"]
    if [q["body"] for q in loads] != [{"lora_name": "selroll-policy-v1", "lora_path": "/ckpt/wsq/v1"}]:
        print("FAIL registry: %s loads %s" % (f, [q["body"] for q in loads])); sys.exit(1)
    if ready < loads[0]["t1"] - 0.05:
        print("FAIL registry: version 1 published %.3f s before %s confirmed" % (loads[0]["t1"] - ready, f)); sys.exit(1)
print("ok   registry: no --policy-servers, both servers of selroll:wsq:policy:* loaded selroll-policy-v1 before version 1 was published")
PYEOF
)
if [ $RC -eq 0 ] && [[ $out == ok* ]]; then echo "$out"; else bad "registry: rc=$RC $out $(tail -2 "$T/wsq.err")"; fi

# --- neither --policy-servers nor a registered server: the first WEIGHTS_READY stops the run --------
train wsn 1 "--weights-sync vllm-lora" run
line=$(grep -h "no --policy-servers and no policy server in Redis" "$T/wsn.err" "$OUT/logs/coordinator.log" 2>/dev/null | head -1)
if [ $RC -eq 1 ] && [ -n "$line" ] && ! grep -q "trainer ready with version 1" "$OUT/logs/coordinator.log"; then
  ok "no server anywhere: exit 1, version 1 never published: ${line#*ERROR }"
else
  bad "no server anywhere: rc=$RC line='$line' $(tail -2 "$T/wsn.err")"
fi
exit $fail
