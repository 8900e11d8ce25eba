#!/usr/bin/env bash
# it_dashboard.sh: the coordinator's HTTP face during one real `selroll run` (two rounds of 32
# groups of 8 on 4 actors of 64 slots: 256 trajectories at once, the gate at d_L 0.3 so that
# groups get cancelled), with a bearer token set. Checks, while the run goes on:
#  - /health answers 200 without the token; every other path refuses a request without it (401);
#    an unknown path is 404, a POST 405, 64 KiB of headers 431, and the coordinator keeps going;
#  - the coordinator's /metrics and those of every other process (`selroll run --metrics`: actors,
#    env workers, gate, policy server, listed in prometheus-targets.json) pass `promtool check
#    metrics` with no lint remark, and the coordinator's carries the gauges the autoscaler relies
#    on; a real Prometheus server on loopback scrapes the coordinator (with the token) at least
#    twice, and every other process through the targets file (file_sd);
#  - the event stream /api/events stays under 200 KB/s with 256 trajectories running (the rate
#    and the running count are printed);
#  - headless chromium (tests/browser/dashboard_check.js) sees the numbers change, the group lanes,
#    a cancelled-group marker and the threshold line, measures the main thread's responsiveness and
#    saves a screenshot under the output folder (SELROLL_TEST_OUT, default build/test-out);
#  - `selroll status` prints the same state from Redis;
#  - the gate's figures (gate:stats: rule, mode, audit precision) reach the snapshot, the
#    coordinator's gauge selroll_coordinator_gate_audit_precision and `selroll status`.
# The run must then finish with exit code 0. Needs chromium, prometheus (promtool), node and
# tests/browser/node_modules (scripts/deps.sh --test installs them all).
set -u
cd "$(dirname "$0")/.."
S=bin/selroll
PY=${SELROLL_PYTHON:-/usr/bin/python3}
OUT=${SELROLL_TEST_OUT:-build/test-out}/it_dashboard
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
fail=0
T=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$OUT/logs"; [ -d "$T/run/logs" ] && cp -r "$T/run/logs" "$OUT/logs"
  cp "$T"/*.txt "$OUT/" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

for tool in promtool prometheus node; do
  command -v $tool >/dev/null || { bad "$tool is missing (run scripts/deps.sh --test)"; exit 1; }
done
[ -x "${SELROLL_CHROMIUM:-/usr/bin/chromium}" ] || { bad "chromium is missing (run scripts/deps.sh --test)"; exit 1; }
if [ ! -d tests/browser/node_modules/playwright-core ]; then
  (cd tests/browser && npm ci --no-audit --no-fund --silent) || { bad "npm ci in tests/browser failed"; exit 1; }
fi

RP=$(free_port); HP=$(free_port); PP=$(free_port)
TOK=dash-$RANDOM$RANDOM
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" >"$T/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$RP" ping >/dev/null 2>&1 && break; sleep 0.1; done
REDIS=redis://127.0.0.1:$RP
H=http://127.0.0.1:$HP
AUTH="Authorization: Bearer $TOK"

start=$(date +%s)
timeout 150 "$S" run --redis "$REDIS" --run dash --out "$T/run" --groups 32 --group-size 8 --iters 2 \
  --actors 4 --slots 64 --time-scale 10 --threshold 0.3 --grace-ms 1000 \
  --coordinator-args "--http 127.0.0.1:$HP --http-token $TOK" \
  --metrics \
  >"$T/run.out" 2>"$T/run.err" &
run_pid=$!
pids+=($run_pid)
# The browser starts at once (chromium takes a while on a busy machine) and waits for the page.
node tests/browser/dashboard_check.js "$H/?token=$TOK" "$OUT" >"$T/browser.out" 2>&1 &
browser_pid=$!
pids+=($browser_pid)

code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
for _ in $(seq 200); do [ "$(code "$H/health")" = 200 ] && break; sleep 0.1; done
[ "$(code "$H/health")" = 200 ] && ok "/health 200 without the token" || { bad "/health never answered 200"; tail -5 "$T/run.err"; exit 1; }

# ---- bad requests -------------------------------------------------------------------------------
[ "$(code "$H/api/state")" = 401 ] && ok "/api/state without the token: 401" || bad "/api/state without the token: $(code "$H/api/state")"
[ "$(code "$H/metrics")" = 401 ] && ok "/metrics without the token: 401" || bad "/metrics without the token is not 401"
[ "$(code -H "Authorization: Bearer wrong" "$H/")" = 401 ] && ok "a wrong token: 401" || bad "a wrong token is not 401"
[ "$(code -H "$AUTH" "$H/nope")" = 404 ] && ok "unknown path: 404" || bad "unknown path is not 404"
[ "$(code -H "$AUTH" -X POST -d x=1 "$H/api/state")" = 405 ] && ok "POST: 405" || bad "POST is not 405"
big=$(head -c 65536 /dev/zero | tr '\0' a)
[ "$(code -H "$AUTH" -H "X-Big: $big" "$H/api/state")" = 431 ] && ok "64 KiB of headers: 431" || bad "oversize headers are not 431"
[ "$(code -H "$AUTH" "$H/")" = 200 ] && ok "the page with the token: 200" || bad "the page with the token is not 200"
[ "$(code "$H/?token=$TOK")" = 200 ] && ok "the page with ?token=: 200" || bad "the page with ?token= is not 200"
[ "$(code "$H/health")" = 200 ] && ok "the coordinator keeps serving after bad requests" || bad "/health failed after bad requests"

# ---- wait for the full load -------------------------------------------------------------------
running=0
for _ in $(seq 150); do
  running=$(curl -s -H "$AUTH" "$H/api/state" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["counts"]["running_trajectories"])' 2>/dev/null || echo 0)
  [ "${running:-0}" -ge 256 ] && break
  sleep 0.1
done
[ "${running:-0}" -ge 256 ] && ok "256 trajectories running at once" || echo "note: $running trajectories running at most before the measurements"
thr=$(curl -s -H "$AUTH" "$H/api/state" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["hist"]["threshold"])' 2>/dev/null)
[ "$thr" = 0.3 ] && ok "the histogram's threshold line is the gate's d_L (0.3, passed on by selroll run)" || bad "histogram threshold $thr, not 0.3"

# ---- the event stream's byte rate at that load ---------------------------------------------------
(curl -sN --max-time 5 -H "$AUTH" "$H/api/events" >"$T/sse.txt" 2>/dev/null; true) &
sse_pid=$!


# ---- /metrics: promtool and a real Prometheus ---------------------------------------------------
# Every registry checked must pass promtool with no remark at all: a parse error, and any lint
# complaint (abbreviated units, counters without _total, ...), fails the test.
promlint() { # promlint ROLE FILE PREFIX: promtool over one role's scrape
  local out="${2%.txt}.promtool"
  if promtool check metrics <"$2" >"$out" 2>&1 && ! grep -q . "$out" && grep -q "^$3" "$2"; then
    ok "$1 /metrics: promtool check metrics passes without remarks ($(grep -c "^$3" "$2") series)"
  else
    bad "$1 /metrics: promtool check metrics:"; head -5 "$out"
  fi
}
curl -s -H "$AUTH" "$H/metrics" >"$T/metrics.txt"
promlint coordinator "$T/metrics.txt" selroll_coordinator_
# selroll run --metrics: one file_sd entry per process serving /metrics (role and child labels).
TARGETS="$T/run/prometheus-targets.json"
for _ in $(seq 100); do [ -s "$TARGETS" ] && break; sleep 0.1; done
mapfile -t kids < <("$PY" -c '
import json, sys
for t in json.load(open(sys.argv[1])):
    l = t["labels"]
    if l["selroll_role"] != "coordinator":
        print(l["selroll_role"], l["selroll_child"], t["targets"][0])' "$TARGETS" 2>/dev/null)
[ "${#kids[@]}" -eq 8 ] && ok "prometheus-targets.json lists 8 processes besides the coordinator (4 actors, 2 env workers, gate, policy server)" || bad "prometheus-targets.json lists ${#kids[@]} processes besides the coordinator, not 8"
for k in "${kids[@]}"; do
  read -r role child addr <<<"$k"
  prefix=selroll_$role; [ "$role" = env-worker ] && prefix=selroll_envw; [ "$role" = policy-server ] && prefix=selroll_policy
  curl -s "http://$addr/metrics" >"$T/metrics_$child.txt"
  promlint "$child (--metrics)" "$T/metrics_$child.txt" "${prefix}_"
done
for g in selroll_coordinator_actors selroll_coordinator_free_slots selroll_coordinator_queued_jobs \
         selroll_coordinator_queued_jobs_per_free_slot; do
  grep -q "^$g " "$T/metrics.txt" && ok "gauge $g = $(grep "^$g " "$T/metrics.txt" | cut -d' ' -f2)" || bad "gauge $g missing"
done
grep -q '^selroll_coordinator_actors 4$' "$T/metrics.txt" && ok "4 actors in the pool" || bad "selroll_coordinator_actors is not 4"
mkdir -p "$T/prom"
cat >"$T/prom/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: selroll
    authorization:
      credentials: $TOK
    static_configs:
      - targets: ['127.0.0.1:$HP']
  - job_name: selroll-children
    file_sd_configs:
      - files: ['$TARGETS']
    relabel_configs:
      - source_labels: [selroll_role]
        regex: coordinator
        action: drop
EOF
prometheus --config.file="$T/prom/prometheus.yml" --storage.tsdb.path="$T/prom/data" \
  --web.listen-address="127.0.0.1:$PP" >"$T/prom/log" 2>&1 &
prom_pid=$!
pids+=($prom_pid)
scrapes=0
for _ in $(seq 60); do
  sleep 0.5
  scrapes=$(curl -s "http://127.0.0.1:$PP/api/v1/query" --data-urlencode 'query=count_over_time(selroll_coordinator_actors[5m])' |
    "$PY" -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(int(float(r[0]["value"][1])) if r else 0)' 2>/dev/null || echo 0)
  [ "${scrapes:-0}" -ge 2 ] && break
done
[ "${scrapes:-0}" -ge 2 ] && ok "Prometheus scraped /metrics $scrapes times (token via authorization)" || { bad "Prometheus scraped $scrapes times"; tail -3 "$T/prom/log"; }
up=$(curl -s "http://127.0.0.1:$PP/api/v1/query" --data-urlencode 'query=up{job="selroll"}' | "$PY" -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "none")' 2>/dev/null)
[ "$up" = 1 ] && ok "Prometheus target up" || bad "Prometheus target up = $up"
kup=0
for _ in $(seq 20); do
  kup=$(curl -s "http://127.0.0.1:$PP/api/v1/query" --data-urlencode 'query=count(up{job="selroll-children"} == 1)' | "$PY" -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)' 2>/dev/null)
  [ "${kup:-0}" = 8 ] && break
  sleep 0.5
done
[ "${kup:-0}" = 8 ] && ok "Prometheus scrapes the 8 other processes through prometheus-targets.json (file_sd), all up" || bad "Prometheus: ${kup:-0} of the 8 processes in prometheus-targets.json up"
kill "$prom_pid" 2>/dev/null

wait "$sse_pid"
bytes=$(wc -c <"$T/sse.txt")
events=$(grep -c '^event: state' "$T/sse.txt")
rate=$((bytes / 5))
if [ "$events" -ge 3 ] && [ "$rate" -lt 200000 ]; then
  ok "event stream: $events snapshots, $bytes bytes in 5 s = $rate B/s (< 200 KB/s) with $running trajectories running"
else
  bad "event stream: $events snapshots, $rate B/s"
fi

# ---- the Grafana dashboard names only series that some role registers -------------------------
missing=""
for m in $(grep -o 'selroll_[a-z_]*' deploy/grafana/selroll.json | sed 's/_bucket$//' | sort -u); do
  grep -rqs "\"$m\"" common coordinator actor gate env_worker policy trainer tools || missing="$missing $m"
done
[ -z "$missing" ] && ok "deploy/grafana/selroll.json names only registered series" || bad "Grafana series nobody registers:$missing"

# ---- selroll status ---------------------------------------------------------------------------
"$S" status --redis "$REDIS" --run dash >"$T/status.out" 2>&1
if grep -q "selroll status: run dash (running)" "$T/status.out" && grep -q "trajectories running" "$T/status.out" &&
   grep -q "actors:" "$T/status.out" && grep -q "d_K histogram" "$T/status.out"; then
  ok "selroll status shows the run from Redis ($(grep -c '^  r0' "$T/status.out") group lines)"
else
  bad "selroll status:"; head -20 "$T/status.out"
fi
timeout 2 "$S" status --redis "$REDIS" --run dash --watch --interval-ms 300 >"$T/watch.out" 2>&1
wrc=$?; screens=$(grep -c "selroll status: run dash" "$T/watch.out")
# timeout(1) says 124 once it had to send SIGTERM; status then leaves at once
{ [ $wrc -eq 124 ] || [ $wrc -eq 0 ]; } && [ "$screens" -ge 3 ] && ok "status --watch redrew $screens times in 2 s" || bad "status --watch: exit $wrc, $screens screens"
"$S" status --redis "$REDIS" --run nosuchrun >/dev/null 2>&1 && bad "status of an unknown run exits 0" || ok "status of an unknown run exits 1"
cp "$T/status.out" "$OUT/status.txt"

# ---- the gate's figures (gate:stats) in the snapshot, the coordinator's gauge and status ----------
gate=$(curl -s -H "$AUTH" "$H/api/state" | "$PY" -c 'import json,sys; g=json.load(sys.stdin)["gate"]; print(g["recorded"], g.get("rule"), g.get("mode"), g.get("audit_precision"))' 2>/dev/null)
gauge=$(curl -s -H "$AUTH" "$H/metrics" | grep '^selroll_coordinator_gate_audit_precision ' | cut -d' ' -f2)
if [ "${gate% *}" = "True paper enforce" ] && [ -n "$gauge" ] && grep -q '^gate: rule paper (enforce), ' "$T/status.out"; then
  ok "the gate's figures from Redis: snapshot ($gate), gauge selroll_coordinator_gate_audit_precision $gauge, selroll status ($(grep '^gate: ' "$T/status.out"))"
else
  bad "the gate's figures: snapshot '$gate', gauge '$gauge', status '$(grep '^gate' "$T/status.out")'"
fi

wait "$browser_pid"
brc=$?
cat "$T/browser.out"
[ $brc -eq 0 ] && ok "browser checks pass" || bad "browser checks failed (exit $brc)"
grep '^PERF ' "$T/browser.out" | sed 's/^PERF //' >"$OUT/responsiveness.json"

# compute saved: cut groups with an estimate of the calls they did not make
saved=""
for _ in $(seq 40); do
  saved=$(curl -s -H "$AUTH" "$H/api/state" | "$PY" -c 'import json,sys; v=json.load(sys.stdin)["saved"]; print(v["cancelled_groups"], v["llm_calls_spent"], v["llm_calls_saved_est"], v["tokens_saved_est"]) if v["cancelled_groups"] > 0 and v["llm_calls_saved_est"] > 0 else None' 2>/dev/null)
  [ -n "$saved" ] && [ "$saved" != None ] && break
  sleep 0.5
done
if [ -n "$saved" ] && [ "$saved" != None ]; then
  set -- $saved; ok "compute saved: $1 cut groups spent $2 LLM calls and saved about $3 calls, $4 tokens"
else
  bad "no compute-saved estimate while groups were cut"
fi

wait "$run_pid"
rc=$?
took=$(( $(date +%s) - start ))
[ $rc -eq 0 ] && ok "selroll run finished in ${took}s" || { bad "selroll run exited $rc after ${took}s"; tail -5 "$T/run.err"; }
grep -q "dashboard, /metrics and /health on http://127.0.0.1:$HP" "$T/run/logs/coordinator.log" && ok "the coordinator logged its dashboard address" || bad "no dashboard line in the coordinator's log"
echo "output: $OUT"
exit $fail
