#!/usr/bin/env bash
# it_tokens.sh: --tokens against tests/stub_openai.py in vLLM's and SGLang's documented shapes of
# return_token_ids: the token ids, per-token logprobs and (with full) the prompt ids the stub sent
# are in the round file step by step, exactly; the prompt rebuilds from
# its delta; vLLM's "token_id:N" strings are read as ids; a count that disagrees with usage is
# flagged with tokens_mismatch; with tokens off nothing is asked for. The built-in policy server
# with --tokens full: the ids decode (docs/policy.md's vocabulary, decoded here in Python) to the
# step's text and to the prompt, the logprobs sum to the step's logprob, and a training run of 3
# iterations passes the built-in trainer's id check. The stub serving a training run on copy games
# (tests/py_env_worker.py, for a reward spread): the BATCH an external trainer (a Python PULL/PUSH
# here) receives carries, step by step, exactly the ids and logprobs the stub sent.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
T=$tmp

# stub NAME ARGS...: starts the stub; sets SP (its port) and SLOG (its request log).
stub() {
  local name=$1; shift
  SLOG="$T/$name.req.jsonl"
  "$PY" tests/stub_openai.py --log "$SLOG" --port-file "$T/$name.port" "$@" 2>"$T/$name.stub.err" &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$T/$name.port" ] && break; sleep 0.05; done
  SP=$(cat "$T/$name.port" 2>/dev/null)
  wait_port "$SP" || { bad "$name: the stub did not start: $(tail -2 "$T/$name.stub.err")"; exit 1; }
}

# run_stub NAME RUN-ARGS ACTOR-ARGS: one `selroll run` against the stub on $SP; sets OUT.
run_stub() {
  local name=$1 rargs=$2 aargs=$3
  OUT="$T/$name"
  # shellcheck disable=SC2086
  timeout 90 "$S" run --run "$name" --out "$OUT" $rargs --actors 1 --slots 4 --env-workers 1 \
    --no-gate --http off --actor-args "--policy http://127.0.0.1:$SP --model Qwen/Qwen3-8B $aargs" \
    >"$T/$name.out" 2>"$T/$name.err"
  local rc=$?
  [ $rc -eq 0 ] || { bad "$name: selroll run exit $rc: $(tail -3 "$T/$name.err")"; return 1; }
}

# check NAME FILES PYTHON-BODY: `sent` maps the stub's reasoning text to what it sent, `trajs` are
# the trajectories of FILES (round or batch JSONL), `steps` their steps.
check() {
  "$PY" - "$SLOG" "$1" "$2" <<PYEOF
import glob, json, sys
sent = {}
for l in open(sys.argv[1]):
    q = json.loads(l)
    if q.get("status") == "ids":
        sent[q["reasoning"]] = q
name, trajs = sys.argv[2], []
for f in sorted(glob.glob(sys.argv[3])):
    for l in open(f):
        o = json.loads(l)
        if "steps" in o:
            trajs.append(o)
        for g in o.get("groups", []):
            trajs.extend(g.get("trajectories", []))
steps = [s for t in trajs for s in t["steps"]]
def need(cond, what):
    if not cond:
        print("FAIL %s: %s" % (name, what)); sys.exit(1)
need(steps, "no steps in %s" % sys.argv[3])
def close(a, b):
    return len(a) == len(b) and all(abs(x - y) <= 1e-6 * max(1, abs(y)) for x, y in zip(a, b))
$3
PYEOF
}

# the exact-ids check shared by the shapes: ids, logprobs and their sum, step by step
EXACT='
for s in steps:
    q = sent.get(s.get("reasoning"))
    need(q, "a step the stub did not answer: %s" % s.get("reasoning"))
    need(s.get("token_ids") == q["token_ids"], "ids differ: %s vs %s" % (s.get("token_ids"), q["token_ids"]))
    need(close(s.get("token_logprobs", []), q["token_logprobs"]), "logprobs differ")
    need(abs(sum(q["token_logprobs"]) - s["logprob"]) < 1e-6, "logprob is not the sum")
    need(not s.get("tokens_mismatch") and s["completion_tokens"] == len(q["token_ids"]), "mismatch flagged")
'
# the prompt of each step rebuilt from prompt_prefix and prompt_token_ids
PROMPT='
for t in trajs:
    prev = None
    for s in t["steps"]:
        q = sent[s["reasoning"]]
        part = s.get("prompt_token_ids", [])
        if prev is None:
            need("prompt_prefix" not in s, "a first step with a prefix")
            full = part
        else:
            need("prompt_prefix" in s, "a later step without prompt_prefix")
            full = prev[:s["prompt_prefix"]] + part
        need(full == q["prompt_token_ids"], "step %d: the rebuilt prompt differs" % s["i"])
        prev = full + s["token_ids"]
'

# --- vLLM, --tokens full: round file; the prompt as a delta ---------------------------------------
stub vllm --flavor vllm
if run_stub vllm "--groups 2 --group-size 2 --iters 1 --max-steps 3" "--tokens full"; then
  out=$(check vllm "$T/vllm/rounds/round-*.jsonl" "$EXACT$PROMPT
need(any(s.get('prompt_prefix', 0) > 0 for s in steps), 'no prefix shared')
print('ok   vllm full: %d steps carry exactly the ids, logprobs and prompt ids sent' % len(steps))")
  echo "$out"; [[ $out == ok* ]] || fail=1
fi

# --- SGLang, --tokens full: ids on the choice -----------------------------------------------------
stub sglang --flavor sglang
if run_stub sglang "--groups 1 --group-size 2 --iters 1 --max-steps 3" "--tokens full"; then
  out=$(check sglang "$T/sglang/rounds/round-*.jsonl" "$EXACT$PROMPT
print('ok   sglang full: %d steps carry exactly the ids, logprobs and prompt ids sent' % len(steps))")
  echo "$out"; [[ $out == ok* ]] || fail=1
fi

# --- vLLM's token_id:N strings, --tokens completion: no prompt ids ---------------------------------
stub vllmstr --flavor vllm --token-id-strings
if run_stub vllmstr "--groups 1 --group-size 2 --iters 1 --max-steps 2" "--tokens completion"; then
  out=$(check vllmstr "$T/vllmstr/rounds/round-*.jsonl" "$EXACT
need(all('prompt_token_ids' not in s and 'prompt_prefix' not in s for s in steps), 'prompt ids with completion')
print('ok   vllm token_id:N: %d steps carry the ids read from the strings' % len(steps))")
  echo "$out"; [[ $out == ok* ]] || fail=1
fi

# --- a count that disagrees with usage is flagged ---------------------------------------------------
stub mism --flavor vllm-new --token-mismatch
if run_stub mism "--groups 1 --group-size 2 --iters 1 --max-steps 2" "--tokens completion"; then
  out=$(check mism "$T/mism/rounds/round-*.jsonl" "
need(all(s.get('tokens_mismatch') is True for s in steps), 'a mismatch not flagged')
need(all(s['completion_tokens'] == len(s['token_ids']) + 1 for s in steps), 'the ids were changed')
print('ok   mismatch: %d steps flagged tokens_mismatch, ids kept as sent' % len(steps))")
  echo "$out"; [[ $out == ok* ]] || fail=1
fi

# --- --tokens off: return_token_ids is not asked for ------------------------------------------------
stub off --flavor vllm
if run_stub off "--groups 1 --group-size 2 --iters 1 --max-steps 2" "--tokens off"; then
  n=$(grep -c '"ids"' "$SLOG")
  if [ "$n" = 0 ] && ! grep -q token_ids "$T/off/rounds/round-0.jsonl"; then
    ok "off: no ids asked for or recorded"
  else
    bad "off: $n answers with ids"
  fi
fi
# --- the built-in policy server, --tokens full: ids decode to the texts ---------------------------
OUT="$T/builtin"
if timeout 90 "$S" run --run builtin --out "$OUT" --groups 2 --group-size 2 --iters 1 --max-steps 3 \
    --actors 1 --slots 4 --env-workers 1 --no-gate --http off --tokens full \
    --actor-args "--record-messages" >"$T/builtin.out" 2>"$T/builtin.err"; then
  out=$("$PY" - "$OUT/rounds/round-0.jsonl" <<'PYEOF'
import json, sys
A = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
P = 62 + 62**2 + 62**3 + 62**4
C = 256 + P
OFF = [0, 0, 62, 62 + 62**2, 62 + 62**2 + 62**3, P]
def piece(i):
    pre, core = divmod(i, C)
    assert 0 <= pre <= 2, i
    s = b"" if pre == 0 else (b" " if pre == 1 else b"\n")
    if core < 256:
        return s + bytes([core])
    k = core - 256
    n = max(l for l in range(1, 5) if k >= OFF[l])
    v, out = k - OFF[n], ""
    for _ in range(n):
        v, d = divmod(v, 62)
        out = A[d] + out
    return s + out.encode()
def decode(ids):
    return b"".join(piece(i) for i in ids).decode()
trajs = [json.loads(l) for l in open(sys.argv[1])]
steps = [s for t in trajs for s in t["steps"]]
def need(c, what):
    if not c:
        print("FAIL builtin: " + what); sys.exit(1)
need(steps, "no steps")
for t in trajs:
    prev = None
    for s in t["steps"]:
        need(decode(s["token_ids"]) == s["raw"], "step %d: ids do not decode to raw" % s["i"])
        need(abs(sum(s["token_logprobs"]) - s["logprob"]) < 1e-5, "logprob sum %g vs %g" %
             (sum(s["token_logprobs"]), s["logprob"]))
        need(not s.get("tokens_mismatch") and s["completion_tokens"] == len(s["token_ids"]), "mismatch")
        full = s.get("prompt_token_ids", []) if prev is None else prev[:s["prompt_prefix"]] + s.get("prompt_token_ids", [])
        want = "".join("<|%s|>\n%s\n" % (m["role"], m["content"]) for m in s["messages"]) + "<|assistant|>\n"
        need(decode(full) == want, "step %d: prompt ids do not decode to the messages" % s["i"])
        need(s["prompt_tokens"] == len(full), "prompt_tokens is not the id count")
        prev = full + s["token_ids"]
print("ok   builtin full: %d steps: ids decode to raw and to the prompt, logprobs sum to logprob" % len(steps))
PYEOF
)
  echo "$out"; [[ $out == ok* ]] || fail=1
else
  bad "builtin: selroll run exit $?: $(tail -3 "$T/builtin.err")"
fi

# --- training with the built-in trainer: 3 iterations pass its id check --------------------------
OUT="$T/train3"
if timeout 120 "$S" run --run train3 --out "$OUT" --iters 3 --batch-groups 1 --group-size 4 \
    --max-steps 15 --eval-tasks 0 --actors 1 --slots 8 --env-workers 1 --no-gate --http off \
    --grace-ms 1000 --tokens full >"$T/train3.out" 2>"$T/train3.err"; then
  n=$(cat "$OUT"/batches/iter_*.jsonl 2>/dev/null | grep -c '"token_ids"')
  if grep -rq "refused:" "$OUT/logs" "$T/train3.err"; then
    bad "train3: a batch was refused: $(grep -rh "refused:" "$OUT/logs" "$T/train3.err" | head -1)"
  elif ! line=$(grep -h "stopping at version" "$OUT/logs/trainer.log" "$T/train3.err" | head -1) ||
       ! grep -Eq "[1-9][0-9]* trained, 0 acked again, 0 refused" <<<"$line"; then
    bad "train3: the trainer did not train without refusals: $line"
  elif ! same=$("$PY" - "$OUT" <<'PYEOF'
import glob, json, sys
res = {}
for f in glob.glob(sys.argv[1] + "/rounds/round-*.jsonl"):
    for l in open(f):
        r = json.loads(l)
        res[r["job_id"]] = r
n = 0
for f in glob.glob(sys.argv[1] + "/batches/iter_*.jsonl"):
    for l in open(f):
        g = json.loads(l)
        for k, t in enumerate(g.get("trajectories", [])):
            r = res.get(t["job_id"])
            if not r:
                print("no round line for %s" % t["job_id"]); sys.exit(1)
            for a, b in zip(t["steps"], r["steps"]):
                for key in ("token_ids", "token_logprobs", "prompt_token_ids", "prompt_prefix"):
                    if a.get(key) != b.get(key):
                        print("%s step %d: %s differs from the RESULT" % (t["job_id"], a["i"], key)); sys.exit(1)
                n += 1
            if not t["steps"] or "token_ids" not in t["steps"][0]:
                print("a batch trajectory without token ids"); sys.exit(1)
            if not isinstance(g["advantages"][k], (int, float)):
                print("no advantage for trajectory %d" % k); sys.exit(1)
print(n)
PYEOF
); then
    bad "train3: batch and RESULT differ: $same"
  elif [ "$n" -gt 0 ]; then
    ok "train3: 3 iterations, no batch refused, $same batch steps carry the RESULT's ids and logprobs exactly ($line)"
  else
    bad "train3: no token ids in the batches"
  fi
else
  bad "train3: selroll run exit $?: $(tail -3 "$T/train3.err")"
fi

# --- the stub's ids all the way into a BATCH: an external trainer records what it received --------
# Copy games (tests/py_env_worker.py) give the groups a reward spread: the stub says one of the
# words at random, right or wrong.
stub trainstub --flavor vllm
gport=$(free_port)
"$PY" tests/py_env_worker.py "tcp://127.0.0.1:$gport" "$T/trainstub.resets.jsonl" 2>"$T/trainstub.envw.err" &
pids+=($!)
wait_port "$gport" || { bad "trainstub: the Python env worker did not start"; exit 1; }
for w in amber birch cedar delta ember; do
  printf '{"id": "copy-%s", "type": "copy", "env": "games", "word": "%s", "choices": ["%s", "other"]}\n' "$w" "$w" "$w"
done >"$T/copy.jsonl"
p1=$(free_port); p2=$(free_port)
"$PY" - "tcp://127.0.0.1:$p1" "tcp://127.0.0.1:$p2" "$T/trainstub.batches.jsonl" >"$T/trainstub.trainer" 2>&1 <<'PYEOF' &
import json, struct, sys, msgpack, zmq
ctx = zmq.Context()
pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
pull.bind(sys.argv[1]); push.connect(sys.argv[2])
out = open(sys.argv[3], "a")
def ints(b): return list(struct.unpack("<%di" % (len(b) // 4), b)) if isinstance(b, bytes) else b
def floats(b): return list(struct.unpack("<%df" % (len(b) // 4), b)) if isinstance(b, bytes) else b
while True:
    b = msgpack.unpackb(pull.recv(), raw=False)
    if b.get("t") != "BATCH":
        continue
    for g in b["groups"]:
        for t, adv in zip(g["trajectories"], g["advantages"]):
            steps = []
            for st in t["steps"]:
                steps.append({"reasoning": st.get("reasoning"), "advantage": adv,
                              "logprob": st.get("logprob"),
                              "completion_tokens": st.get("completion_tokens"),
                              "tokens_mismatch": st.get("tokens_mismatch", False),
                              "token_ids": ints(st.get("token_ids", b"")),
                              "token_logprobs": floats(st.get("token_logprobs", b""))})
            out.write(json.dumps({"steps": steps}) + "\n")
    out.flush()
    push.send(msgpack.packb({"t": "WEIGHTS_READY", "v": 1, "run": b["run"], "iteration": b["iteration"],
                             "ok": True, "version": int(b["policy_version"]) + 1, "loss": 0.0,
                             "info": "recorded"}, use_bin_type=True))
PYEOF
pids+=($!)
OUT="$T/trainstub"
if timeout 90 "$S" run --run trainstub --out "$OUT" --iters 1 --batch-groups 1 --group-size 4 \
    --max-steps 3 --eval-tasks 0 --tasks 5 --tasks-file "train=$T/copy.jsonl" \
    --env-endpoints "games=tcp://127.0.0.1:$gport" --actors 1 --slots 4 --no-gate --http off \
    --grace-ms 1000 --trainer "tcp://127.0.0.1:$p1,tcp://127.0.0.1:$p2" \
    --actor-args "--policy http://127.0.0.1:$SP --model Qwen/Qwen3-8B --tokens completion" \
    >"$T/trainstub.out" 2>"$T/trainstub.err"; then
  out=$(check trainstub "$T/trainstub.batches.jsonl" "$EXACT
need(any(s['advantage'] != 0 for s in steps), 'no trajectory with a non-zero advantage')
print('ok   stub -> BATCH: %d steps of the BATCH an external trainer received carry exactly the ids and logprobs the stub sent' % len(steps))")
  echo "$out"; [[ $out == ok* ]] || fail=1
else
  bad "trainstub: selroll run exit $?: $(tail -3 "$T/trainstub.err") $(tail -2 "$T/trainstub.trainer")"
fi
exit $fail
