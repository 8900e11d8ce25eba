#!/usr/bin/env bash
# it_policy_server.sh: `selroll policy-server` as a real process on a free loopback port answers
# /health, /v1/models and a chat completion (cost model on, time scale 50), refuses a bad request
# with an OpenAI-shaped 400, counts the answer in /metrics, and exits 0 on SIGTERM.
set -u
cd "$(dirname "$0")/.."
S=bin/selroll
dir=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
$S policy-server --listen 127.0.0.1:$port --seed 3 --time-scale 50 >"$dir/out" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.05; done
fail=0
curl -sf "http://127.0.0.1:$port/health" | grep -q '"ok"' || { echo "health failed"; fail=1; }
curl -sf "http://127.0.0.1:$port/v1/models" | grep -q '"selroll-policy"' || { echo "models failed"; fail=1; }
body='{"model":"selroll-policy","temperature":0,"messages":[{"role":"user","content":"Your task is to: put a apple in fridge.\nThis is the first step.\nYou are now at step 1 and your current observation is: You arrive at countertop 1. On the countertop 1, you see a apple 1.\nYour admissible actions of the current situation are: [\u0027go to fridge 1\u0027, \u0027take apple 1 from countertop 1\u0027, \u0027look\u0027].\n\nNow it is your turn."}]}'
out=$(curl -s -w ' HTTP%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' -d "$body")
grep -q '<action>take apple 1 from countertop 1</action>' <<<"$out" || { echo "completion: $out"; fail=1; }
grep -q 'HTTP200$' <<<"$out" || { echo "completion status: $out"; fail=1; }
out=$(curl -s -w ' HTTP%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" -d '{"messages": 5}')
grep -q '"error":{"message"' <<<"$out" && grep -q 'HTTP400$' <<<"$out" || { echo "bad request: $out"; fail=1; }
curl -sf "http://127.0.0.1:$port/metrics" | grep -q 'selroll_policy_requests_total{outcome="ok"} 1' || { echo "metrics failed"; fail=1; }
kill -TERM "$pid"; wait "$pid"; rc=$?; pid=
[ $rc -eq 0 ] || { echo "policy-server exited $rc on SIGTERM"; cat "$dir/out"; fail=1; }
[ $fail -eq 0 ] && echo "policy-server on port $port: health, models, greedy completion, 400, metrics, clean SIGTERM"
exit $fail
