#!/usr/bin/env bash
# it_backends.sh: actors against tests/stub_openai.py in the documented response shape of vLLM
# (reasoning_content, and the newer reasoning with reasoning_tokens), SGLang, llama.cpp and Ollama,
# through short `selroll run` rounds: the seed is an exact integer and differs per step (Ollama
# refuses anything else with 400), reasoning lands in the results file beside the raw text, a
# missing usage is recorded as unknown, 429 with Retry-After is retried, a 12k-token answer with
# logprobs is accepted, SGLang's answer under another model name is warned once, and the model
# check refuses a model the server does not list (one line, exit 1).
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

# round NAME GROUPS G STEPS ACTOR-ARGS: one `selroll run` round against the stub on $SP; sets OUT
# and RC.
round() {
  local name=$1 groups=$2 g=$3 steps=$4 aargs=$5
  OUT="$T/$name"
  timeout 60 "$S" run --run "$name" --out "$OUT" --groups "$groups" --iters 1 --group-size "$g" \
    --actors 1 --slots 4 --env-workers 1 --max-steps "$steps" --no-gate --http off \
    --actor-args "--policy http://127.0.0.1:$SP $aargs" >"$T/$name.out" 2>"$T/$name.err"
  RC=$?
  [ $RC -eq 0 ] || { bad "$name: selroll run exit $RC: $(tail -3 "$T/$name.err")"; return 1; }
}

# check NAME PYTHON-BODY: runs the body with `req` (the stub's request log) and `res` (the
# round's RESULT lines) loaded; it prints one line and exits 0 or 1.
check() {
  "$PY" - "$SLOG" "$OUT/rounds/round-0.jsonl" "$1" <<PYEOF
import json, sys
req = [json.loads(l) for l in open(sys.argv[1])]
res = [json.loads(l) for l in open(sys.argv[2])]
steps = [s for r in res for s in r["steps"]]
name = sys.argv[3]
def need(cond, what):
    if not cond:
        print("FAIL %s: %s" % (name, what)); sys.exit(1)
need(res and all(r["status"] in ("done", "truncated") for r in res),
     "every episode finished: %s" % [(r["status"], r.get("error")) for r in res][:3])
$2
PYEOF
}

# --- vLLM: reasoning_content, seeds, 429 + Retry-After ------------------------------------------
stub vllm --flavor vllm --throttle 2
if round vllm 2 2 3 "--model Qwen/Qwen3-8B"; then
  out=$(check vllm '
ok200 = [q for q in req if q["status"] == 200]
need(all(q["seed_type"] == "int" for q in req), "a seed that is not an integer: %s" % req[:2])
seeds = [q["seed"] for q in ok200]
need(len(set(seeds)) == len(seeds), "two requests with the same seed")
first = {q["seed"] for q in ok200 if q["step"] == 1}
need(any(q["step"] > 1 for q in ok200), "no second step")
need(all(q["seed"] - (q["step"] - 1) in first for q in ok200),
     "a later step whose seed does not follow its first step")
need(all(0 <= q["seed"] < 2**63 for q in ok200), "a seed outside 0..2^63-1")
need([q["status"] for q in req[:2]] == [429, 429] and len(ok200) == len(steps),
     "the 429s were not retried once each: %s" % [q["status"] for q in req][:4])
need(max(s["latency_ms"] for s in steps) >= 900, "nothing waited for Retry-After: 1")
need(all(s.get("reasoning", "").startswith("The goal needs") for s in steps), "reasoning missing")
need(all(s["action"] in s["reasoning"] for s in steps), "the action was not from the stub")
need(all(s.get("model") == "Qwen/Qwen3-8B" and not s.get("usage_unknown") for s in steps),
     "model or usage not recorded")
print("ok   vllm: %d requests, integer seeds distinct per step, 2 x 429 retried after Retry-After, "
      "reasoning_content recorded" % len(req))')
  echo "$out"; [[ $out == ok* ]] || fail=1
  grep -q "model check: .* serves Qwen/Qwen3-8B" "$OUT/logs/actor-1.log" \
    && ok "vllm: the model check passed" || bad "vllm: no model check line in the actor log"
fi

# --- vLLM (newer): reasoning with reasoning_tokens ----------------------------------------------
stub vllmnew --flavor vllm-new
if round vllmnew 1 2 2 "--model Qwen/Qwen3-8B"; then
  out=$(check vllmnew '
need(all(s.get("reasoning") and s.get("reasoning_tokens", 0) > 0 for s in steps),
     "reasoning or reasoning_tokens missing: %s" % steps[0])
need(all(s["completion_tokens"] > s["reasoning_tokens"] for s in steps), "token shares")
print("ok   vllm-new: message.reasoning and usage reasoning_tokens recorded")')
  echo "$out"; [[ $out == ok* ]] || fail=1
fi

# --- Ollama /v1: the integer seed is accepted; no usage is recorded as unknown -----------------
stub ollama --flavor ollama --model qwen3:8b --no-usage
if round ollama 1 2 3 "--model qwen3:8b"; then
  out=$(check ollama '
need(req and all(q["status"] == 200 for q in req), "Ollama refused a request: %s" %
     [q for q in req if q["status"] != 200][:1])
need(all(s.get("usage_unknown") is True and s["completion_tokens"] == 0 for s in steps),
     "usage not recorded as unknown")
need(all(r.get("usage_unknown_steps") == r["n_steps"] for r in res), "usage_unknown_steps")
need(all(s.get("reasoning") for s in steps) and all("logprob" not in s for s in steps),
     "reasoning or logprob")
print("ok   ollama: every integer seed accepted, usage unknown on %d steps" % len(steps))')
  echo "$out"; [[ $out == ok* ]] || fail=1
fi

# --- llama.cpp: a 12k-token answer with logprobs ------------------------------------------------
stub llamacpp --flavor llamacpp --model gpt-3.5-turbo --long
if round llamacpp 1 2 2 "--model gpt-3.5-turbo"; then
  out=$(check llamacpp '
need(all(len(s["raw"]) > 60000 and s["completion_tokens"] > 12000 for s in steps),
     "long answers cut: %s" % [len(s["raw"]) for s in steps])
need(all(not s.get("text_truncated") and s.get("reasoning") for s in steps), "truncated or no reasoning")
print("ok   llamacpp: %d answers of 12k tokens (%d bytes of text) with logprobs accepted" %
      (len(steps), len(steps[0]["raw"])))')
  echo "$out"; [[ $out == ok* ]] || fail=1
fi

# --- SGLang: answers under its own model name whatever was asked: warned once -------------------
stub sglang --flavor sglang --model Qwen/Qwen3-8B
if round sglang 1 2 3 "--model qwen-typo --no-model-check"; then
  out=$(check sglang '
need(all(s.get("model") == "Qwen/Qwen3-8B" for s in steps), "the answering model not recorded")
print("ok   sglang: the answering model Qwen/Qwen3-8B recorded on every step")')
  echo "$out"; [[ $out == ok* ]] || fail=1
  n=$(grep -c "answered as model 'Qwen/Qwen3-8B' where 'qwen-typo' was requested" "$OUT/logs/actor-1.log")
  [ "$n" = 1 ] && ok "sglang: the model mismatch warned once" || bad "sglang: mismatch warned $n times"
fi

# --- the built-in policy server: the template passes the model check, answers say their version --
SP=
OUT="$T/builtin"
timeout 60 "$S" run --run builtin --out "$OUT" --groups 1 --iters 1 --group-size 2 --actors 1 \
  --slots 4 --env-workers 1 --max-steps 3 --no-gate --http off \
  --actor-args "--model selroll-policy-v{version}" >"$T/builtin.out" 2>"$T/builtin.err"
rc=$?
if [ $rc -eq 0 ]; then
  out=$("$PY" - "$OUT/rounds/round-0.jsonl" <<'PYEOF'
import json, sys
steps = [s for l in open(sys.argv[1]) for s in json.loads(l)["steps"]]
good = steps and all(s.get("served_version") == 0 and s.get("model") == "selroll-policy-v0"
                     for s in steps)
print(("ok   builtin: %d steps say served_version 0 under selroll-policy-v0" if good else
       "FAIL builtin: served version or model missing: %s") % (len(steps) if good else steps[:1]))
PYEOF
)
  echo "$out"; [[ $out == ok* ]] || fail=1
  grep -q "model check: .* serves selroll-policy-v0" "$OUT/logs/actor-1.log" \
    && ok "builtin: the {version} template passed the model check" || bad "builtin: no model check line"
else
  bad "builtin: selroll run exit $rc: $(tail -3 "$T/builtin.err")"
fi
stub sglang2 --flavor sglang --model Qwen/Qwen3-8B

# --- the model check refuses a model the server does not list ----------------------------------
ep="tcp://127.0.0.1:$(free_port)"
for model in qwen-typo 'Qwen/Qwen3-8B-v{version}'; do
  out=$(timeout 20 "$S" actor --coordinator "$ep" --welcome-timeout-ms 0 --policy "http://127.0.0.1:$SP" \
    --model "$model" --log-level warn 2>&1 >/dev/null); rc=$?
  line=$(grep -c . <<<"$out")
  if [ $rc -eq 1 ] && [ "$line" -eq 1 ] && grep -q "does not serve model '$model'" <<<"$out"; then
    ok "model check: '$model' refused in one line ($out)"
  else
    bad "model check: '$model': rc=$rc out=$out"
  fi
done
"$S" actor --coordinator "$ep" --welcome-timeout-ms 0 --policy "http://127.0.0.1:$SP" \
  --model qwen-typo --no-model-check >/dev/null 2>&1 &
apid=$!
sleep 1
if kill -0 $apid 2>/dev/null; then ok "model check: --no-model-check skips it"; else bad "model check: --no-model-check still stopped"; fi
kill $apid; wait $apid 2>/dev/null

# --- a policy server that is not up yet: the check waits for it, then refuses -----------------
lp=$(free_port)
"$S" actor --coordinator "$ep" --welcome-timeout-ms 0 --policy "http://127.0.0.1:$lp" \
  --model qwen-typo --log-level warn >/dev/null 2>"$T/late.err" &
apid=$!
sleep 1.5
if kill -0 $apid 2>/dev/null && grep -q "model check: GET .*asking again every 1000 ms" "$T/late.err"; then
  "$PY" tests/stub_openai.py --flavor vllm --port "$lp" 2>/dev/null &
  pids+=($!)
  for _ in $(seq 100); do kill -0 $apid 2>/dev/null || break; sleep 0.1; done
  wait $apid; rc=$?
  if [ $rc -eq 1 ] && grep -q "does not serve model 'qwen-typo'" "$T/late.err"; then
    ok "model check: waited for a late server, then refused the model"
  else
    bad "model check: late server: rc=$rc $(tail -2 "$T/late.err")"
  fi
else
  bad "model check: an unreachable server stopped the actor: $(tail -2 "$T/late.err")"
  kill $apid 2>/dev/null; wait $apid 2>/dev/null
fi
exit $fail
