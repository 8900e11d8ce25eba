#!/usr/bin/env bash
# it_tokens.sh: --tokens against tests/stub_openai.py in vLLM's and SGLang's documented shapes of
# return_token_ids: the token ids, per-token logprobs and (with full) the prompt ids the stub sent
# are in the round file step by step, exactly; the prompt rebuilds from
# its delta; vLLM's "token_id:N" strings are read as ids; a count that disagrees with usage is
# flagged with tokens_mismatch; with tokens off nothing is asked for.
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
exit $fail
