#!/usr/bin/env bash
# it_policy_server.sh: `selroll policy-server` as a real process on a free loopback port answers
# /health, /v1/models and a chat completion (cost model on, time scale 50), refuses a bad request
# with an OpenAI-shaped 400, counts the answer in /metrics, and exits 0 on SIGTERM. Started with
# --redis while that Redis is down, it serves at once and stores version 0 there once a
# redis-server is started on that port; a malformed Redis URL or a wrong password exit 1.
set -u
cd "$(dirname "$0")/.."
S=bin/selroll
dir=$(mktemp -d)
pid=
rpid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; [ -n "$rpid" ] && kill "$rpid" 2>/dev/null; rm -rf "$dir"; }
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

# Started while its Redis is down: it serves version 0 at once, and stores version 0 in Redis
# once a redis-server is started on that port. A malformed URL or a wrong password: exit 1, one line.
fport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dport=$(fport); port=$(fport)
$S policy-server --listen 127.0.0.1:$port --seed 3 --time-scale 50 --redis "redis://127.0.0.1:$dport" --run pd \
  >"$dir/out-down" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.05; done
curl -sf "http://127.0.0.1:$port/health" | grep -q '"ok"' || { echo "down: health failed"; cat "$dir/out-down"; fail=1; }
out=$(curl -s -w ' HTTP%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' -d "$body")
grep -q 'HTTP200$' <<<"$out" || { echo "down: completion with Redis down: $out"; fail=1; }
[ "$(grep -c "Redis does not answer" "$dir/out-down")" = 1 ] || { echo "down: not one 'does not answer' line"; cat "$dir/out-down"; fail=1; }
redis-server --port "$dport" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >/dev/null 2>&1 &
rpid=$!
n=0
for _ in $(seq 100); do n=$(redis-cli -p "$dport" strlen selroll:pd:weights:0 2>/dev/null); [ "${n:-0}" -gt 0 ] && break; sleep 0.05; done
[ "${n:-0}" -gt 1000000 ] || { echo "down: version 0 not in Redis after it started ($n bytes)"; cat "$dir/out-down"; fail=1; }
grep -q "Redis answers" "$dir/out-down" || { echo "down: no 'Redis answers' line"; fail=1; }
kill -TERM "$pid"; wait "$pid"; rc=$?; pid=
[ $rc -eq 0 ] || { echo "down: policy-server exited $rc on SIGTERM"; cat "$dir/out-down"; fail=1; }
out=$($S policy-server --listen 127.0.0.1:0 --redis "redis:/127.0.0.1" 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <<<"$out")" -eq 1 ] || { echo "malformed redis URL: rc=$rc $out"; fail=1; }
out=$($S policy-server --listen 127.0.0.1:0 --redis "redis://:wrong@127.0.0.1:$dport" 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q refused <<<"$out" || { echo "wrong redis password: rc=$rc $out"; fail=1; }
kill "$rpid"; wait "$rpid" 2>/dev/null; rpid=
# A wrong password only shows once Redis answers: then it stops too (exit 1, the refusal said).
port=$(fport)
$S policy-server --listen 127.0.0.1:$port --redis "redis://:wrong@127.0.0.1:$dport" --run pd >"$dir/out-pw" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.05; done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "refused later: did not serve with Redis down"; fail=1; }
redis-server --port "$dport" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --requirepass right >/dev/null 2>&1 &
rpid=$!
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
wait "$pid"; rc=$?; pid=
[ $rc -eq 1 ] && grep -q "refused the connection" "$dir/out-pw" ||
  { echo "refused later: rc=$rc"; cat "$dir/out-pw"; fail=1; }
kill "$rpid"; wait "$rpid" 2>/dev/null; rpid=
[ $fail -eq 0 ] && echo "policy-server started before its Redis: served at once, version 0 in Redis once it answered, a refused password stops it then"
exit $fail
