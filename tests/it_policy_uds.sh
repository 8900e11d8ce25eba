#!/usr/bin/env bash
# it_policy_uds.sh: the policy HTTP over a Unix socket, end to end with real processes.
#   rollout   selroll run --sockets unix (3 rounds x 8 groups, no gate): the built-in policy server
#             listens on policy.sock in the run's socket folder (--uds), POLICY_URL in
#             OUT/endpoints.env is its unix: URL, every group and trajectory is done, the actors'
#             model check went over the socket, and the socket is gone after the run
#   train     selroll run --sockets unix --groups 0 (2 iterations, the built-in trainer): every
#             version reaches the actors (selroll-policy-v{version} over the socket)
#   wsync     --weights-sync sglang-disk --policy-servers unix:PATH against a stub server on a
#             Unix socket: update_weights_from_disk goes over it before version 1 is published
#   refusals  selroll run --policy unix:relative, policy-server --uds on a regular file: one line,
#             non-zero exit, the file left alone
# time limit: 240 s
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
T=$tmp

# --- rollout -------------------------------------------------------------------------------------
OUT="$T/roll"
timeout 120 "$S" run --out "$OUT" --iters 3 --groups 8 --group-size 4 --actors 2 --slots 16 \
  --env-workers 1 --no-gate --no-cost-model --http off --sockets unix >"$T/roll.out" 2>"$T/roll.err"
RC=$?
url=$(sed -n 's/^POLICY_URL=//p' "$OUT/endpoints.env" 2>/dev/null)
rounds=$(grep -c '^round .*groups 8 (done 8, cancelled 0, failed 0), trajectories 32 (failed 0)' "$T/roll.out")
sock=${url#unix:}
if [ $RC -eq 0 ] && [[ $url == unix:/tmp/selroll-sock-*/policy.sock ]] && [ "$rounds" -eq 3 ] &&
   grep -q "listening on $url " "$OUT/logs/policy-server.log" &&
   [ "$(grep -c "model check: http://localhost/v1/models (over $url) serves selroll-policy" "$OUT"/logs/actor-*.log | awk -F: '{s+=$2} END{print s}')" -eq 2 ] &&
   ! grep -q "connection error" "$OUT"/logs/actor-*.log && [ ! -e "$sock" ]; then
  ok "rollout: --sockets unix: the policy on $url (removed after the run), 3 rounds x 8 groups all done, trajectories 96 (failed 0)"
else
  bad "rollout: rc=$RC url='$url' full rounds=$rounds $(tail -2 "$T/roll.err") $(grep -h "connection error" "$OUT"/logs/actor-*.log 2>/dev/null | head -1)"
fi

# --- train: the built-in trainer's versions reach the actors over the socket ---------------------
OUT="$T/train"
timeout 120 "$S" run --out "$OUT" --groups 0 --iters 2 --batch-groups 4 --group-size 4 --actors 2 \
  --slots 16 --env-workers 1 --no-gate --no-cost-model --http off --sockets unix \
  >"$T/train.out" 2>"$T/train.err"
RC=$?
url=$(sed -n 's/^POLICY_URL=//p' "$OUT/endpoints.env" 2>/dev/null)
if [ $RC -eq 0 ] && [[ $url == unix:* ]] && grep -q '^summary: policy v0 -> v2' "$T/train.out" &&
   ! grep -q "failed [1-9]" "$T/train.out"; then
  ok "train: --sockets unix: 2 iterations, policy v0 -> v2, no failed trajectory"
else
  bad "train: rc=$RC url='$url' $(tail -3 "$T/train.out") $(tail -2 "$T/train.err")"
fi

# --- wsync: the weights sync's admin POST over a Unix socket -------------------------------------
it_redis_start
SSOCK="$T/stub.sock"
SLOG="$T/stub.log"
"$PY" tests/stub_openai.py --flavor sglang --uds "$SSOCK" --log "$SLOG" --port-file "$T/stub.port" \
  2>"$T/stub.err" &
pids+=($!)
for _ in $(seq 100); do [ -s "$T/stub.port" ] && break; sleep 0.05; done
p1=$(free_port); p2=$(free_port)
"$PY" docs/examples/trainer.py --pull "tcp://127.0.0.1:$p1" --push "tcp://127.0.0.1:$p2" \
  --run wsu --path "/ckpt/wsu/v{version}" --redis "$RURL" >"$T/wsu.trainer" 2>&1 &
pids+=($!)
OUT="$T/wsu"
timeout 120 "$S" run --run wsu --out "$OUT" --iters 1 --batch-groups 1 --group-size 4 \
  --max-steps 15 --eval-tasks 0 --actors 1 --slots 8 --env-workers 1 --no-gate --http off \
  --grace-ms 1000 --trainer "tcp://127.0.0.1:$p1,tcp://127.0.0.1:$p2" --redis "$RURL" \
  --weights-sync sglang-disk --policy-servers "unix:$SSOCK" --sockets unix \
  >"$T/wsu.out" 2>"$T/wsu.err"
RC=$?
if [ $RC -eq 0 ] &&
   grep -q '"admin": "/update_weights_from_disk", "body": {"model_path": "/ckpt/wsu/v1"}' "$SLOG" &&
   grep -q "trainer ready with version 1" "$OUT/logs/coordinator.log"; then
  ok "wsync: --policy-servers unix:PATH: update_weights_from_disk over the socket, then version 1 published"
else
  bad "wsync: rc=$RC $(tail -2 "$T/wsu.err") $(tail -2 "$SLOG" 2>/dev/null) $(tail -2 "$T/stub.err")"
fi

# --- refusals -------------------------------------------------------------------------------------
msg=$("$S" run --out "$T/bad" --policy unix:policy.sock --groups 1 2>&1 >/dev/null)
RC=$?
if [ $RC -eq 2 ] && [ "$(printf '%s\n' "$msg" | wc -l)" -eq 1 ] && [[ $msg == *"absolute socket path"* ]]; then
  ok "refusals: --policy unix:policy.sock: exit 2, one line ($msg)"
else
  bad "refusals: --policy unix:policy.sock: rc=$RC '$msg'"
fi
echo keep >"$T/plain"
msg=$(timeout 10 "$S" policy-server --uds "$T/plain" 2>&1 >/dev/null)
RC=$?
if [ $RC -ne 0 ] && [ "$(printf '%s\n' "$msg" | wc -l)" -eq 1 ] && [[ $msg == *"not a socket"* ]] &&
   [ "$(cat "$T/plain")" = keep ]; then
  ok "refusals: policy-server --uds on a regular file: exit $RC, one line, the file left alone"
else
  bad "refusals: policy-server --uds on a regular file: rc=$RC '$msg'"
fi

exit $fail
