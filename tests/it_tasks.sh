#!/usr/bin/env bash
# it_tasks.sh: a task set of its own on an environment of its own. tests/py_env_worker.py (Python,
# zmq + msgpack, written from docs/protocol.md) serves two small games, "copy" and "guess", whose
# tasks come from two task files (train and held-out, with "type" and extra fields). `selroll
# run --tasks-file ... --env-endpoints ...` trains on them for 3 iterations end to end with the
# built-in policy server and trainer, on a private redis-server of this script. Checks: every
# RESET's task and task_data came from the files, object for object; the held-out evaluations ran
# the held-out file's tasks and the training rounds and batches the train file's; the per-type
# breakdowns show the files' types; the GRESO prompt histories in Redis are keyed by the train
# file's ids; and nothing in the run's outputs says "household". A bad task file makes `selroll
# run` exit 2 with one line naming the file and the line, before anything starts. Then one run
# mixes two kinds of env worker: a task file whose lines say "env": "games" (the Python worker,
# given as games=EP) or "env": "household" (generated ids, the launcher's own household worker);
# every RESET reaches a worker of its task's env, and a task env no worker is of is refused; the
# same mix again with no list at all: both workers register in Redis with their kinds (the
# Python one over a plain socket) and the coordinator names them from the registry.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh

# ---- the task files and the prompt ------------------------------------------------------------
cat >"$tmp/train.jsonl" <<'EOF'
{"id": "copy-amber", "type": "copy", "word": "amber", "choices": ["amber", "birch", "cedar"], "note": "first"}
{"id": "copy-birch", "type": "copy", "word": "birch", "choices": ["amber", "birch"]}

{"id": "guess-3of4", "type": "guess", "secret": 3, "hi": 4, "level": 1}
{"id": "guess-1of3", "type": "guess", "secret": 1, "hi": 3, "level": 1}
{"id": "copy-cedar", "type": "copy", "word": "cedar", "choices": ["birch", "cedar"], "extra": {"k": [1, 2.5, null, true]}}
{"id": "guess-2of2", "type": "guess", "secret": 2, "hi": 2}
EOF
cat >"$tmp/held.jsonl" <<'EOF'
{"id": "held-copy-oak", "type": "copy", "word": "oak", "choices": ["oak", "elm"]}
{"id": "held-guess-2of3", "type": "guess", "secret": 2, "hi": 3}
{"id": "held-copy-fir", "type": "copy", "word": "fir", "choices": ["ash", "fir"]}
EOF
# The default user prompt with a system message of this environment (docs/prompt.md).
{
  echo "[system]"
  echo "You are an agent playing small word and number games. Pick one admissible action each step."
  sed -n '/^\[user\]/,$p' docs/prompt_default.tmpl
} >"$tmp/games.tmpl"

# ---- a bad task file stops `selroll run` before anything starts -------------------------------
printf '{"id": "a", "type": "copy"}\n{"type": "copy"}\n' >"$tmp/bad.jsonl"
"$S" run --run bad --out "$tmp/bad-out" --tasks-file "train=$tmp/train.jsonl,valid_unseen=$tmp/bad.jsonl" \
  --http off >"$tmp/bad.out" 2>"$tmp/bad.err"
rc=$?
[ $rc -eq 2 ] && ok "a bad task file: selroll run exits 2" || bad "a bad task file: exit $rc, want 2"
want="selroll run: --tasks-file: $tmp/bad.jsonl:2: no \"id\""
[ "$(cat "$tmp/bad.err")" = "$want" ] && ok "one line naming file and line: $(cat "$tmp/bad.err")" ||
  bad "bad task file message: '$(cat "$tmp/bad.err")', want '$want'"
[ ! -e "$tmp/bad-out/logs" ] && ok "nothing was started" || bad "processes were started for a bad task file"
printf '{"id": "x"}\n{"id": "x"}\n' >"$tmp/dup.jsonl"
"$S" run --run bad --out "$tmp/bad-out" --tasks-file "train=$tmp/dup.jsonl" --eval-tasks 0 --http off \
  >/dev/null 2>"$tmp/dup.err"
rc=$?
grep -qx "selroll run: --tasks-file: $tmp/dup.jsonl:2: id \"x\" is already the id of $tmp/dup.jsonl:1" \
  "$tmp/dup.err" && [ $rc -eq 2 ] && ok "a duplicate id is refused with both lines" ||
  bad "duplicate id: exit $rc, '$(cat "$tmp/dup.err")'"

# ---- the run ---------------------------------------------------------------------------------
it_redis_start
eport=$(free_port)
"$PY" tests/py_env_worker.py "tcp://127.0.0.1:$eport" "$tmp/resets.jsonl" 2>"$tmp/pyworker.err" &
pids+=($!)
wait_port "$eport" || { bad "the Python env worker did not start: $(cat "$tmp/pyworker.err")"; exit 1; }
out="$tmp/out"
start=$(date +%s)
timeout 120 "$S" run --run tt --redis "$RURL" --out "$out" --iters 3 \
  --tasks-file "train=$tmp/train.jsonl,valid_unseen=$tmp/held.jsonl" \
  --env-endpoints "tcp://127.0.0.1:$eport" --actors 1 --slots 8 --group-size 4 --batch-groups 2 \
  --eval-every 0 --max-steps 6 --http off --actor-args "--template $tmp/games.tmpl" \
  --grace-ms 1000 >"$tmp/run.out" 2>"$tmp/run.err"
rc=$?
took=$(( $(date +%s) - start ))
[ $rc -eq 0 ] && ok "selroll run on the task files finished in ${took}s" || {
  bad "selroll run exited $rc after ${took}s"; tail -5 "$tmp/run.err"; }
n=$(grep -c '"type":"iteration"' "$out/iterations.jsonl" 2>/dev/null)
[ "${n:-0}" -eq 3 ] && ok "3 iteration lines" || bad "${n:-0} iteration lines, want 3"

"$PY" - "$tmp/train.jsonl" "$tmp/held.jsonl" "$tmp/resets.jsonl" "$out" <<'EOF'
import glob, json, sys
def objs(p):
    return {o["id"]: o for o in (json.loads(l) for l in open(p) if l.strip())}
train, held = objs(sys.argv[1]), objs(sys.argv[2])
files = {**train, **held}
resets = [json.loads(l) for l in open(sys.argv[3])]
out = sys.argv[4]
fail = []
def check(cond, good, badmsg):
    print(("ok   " + good) if cond else ("FAIL " + badmsg))
    if not cond:
        fail.append(badmsg)

check(len(resets) > 0, f"the Python env worker got {len(resets)} RESETs", "no RESET reached the Python env worker")
wrong = [r for r in resets if r["task"] not in files or r["task_data"] != files[r["task"]]]
check(not wrong, "every RESET's task and task_data are a line of the task files, object for object",
      f"RESETs not from the files: {wrong[:2]}")
seen = {r["task"] for r in resets}
check(set(held) <= seen, "every held-out task was played", f"held-out tasks never played: {set(held) - seen}")

evals = [json.loads(l) for l in open(f"{out}/iterations.jsonl") if '"type":"eval"' in l]
check(len(evals) == 2 and all(e["tasks"] == len(held) for e in evals),
      f"2 held-out evaluations of {len(held)} tasks (the whole held-out file)",
      f"evaluations: {[(e['iteration'], e['tasks']) for e in evals]}")
types = {k for e in evals for k in e.get("per_type", {})}
check(types == {"copy", "guess"}, f"per-type breakdowns by the files' types: {sorted(types)}",
      f"per-type keys {sorted(types)}, want copy and guess")
check(all(e.get("per_type", {}).get("copy", {}).get("tasks") == 2 for e in evals),
      "2 copy tasks in each evaluation's breakdown", "copy count in the breakdown is not 2")

# Rounds: an evaluation round holds held-out tasks only, a training round train tasks only.
mixed, foreign, nheld_rounds = [], [], 0
for p in sorted(glob.glob(f"{out}/rounds/round-*.jsonl")):
    tasks = {json.loads(l)["task"] for l in open(p) if l.strip()}
    foreign += [t for t in tasks if t not in files]
    if tasks & set(held):
        nheld_rounds += 1
        if tasks - set(held):
            mixed.append(p)
check(not foreign and not mixed and nheld_rounds == 2,
      f"the 2 evaluation rounds ran the held-out file only, the others the train file",
      f"rounds: foreign {foreign[:3]}, mixed {mixed}, {nheld_rounds} held-out rounds")
btasks = set()
for p in glob.glob(f"{out}/batches/*.jsonl"):
    for l in open(p):
        o = json.loads(l)
        if o.get("type") == "group" or "task" in o:
            btasks.add(o.get("task"))
btasks.discard(None)
check(btasks and btasks <= set(train), f"batches hold train tasks only ({len(btasks)} of them)",
      f"batch tasks {sorted(btasks)} not all from the train file")
sys.exit(1 if fail else 0)
EOF
[ $? -eq 0 ] || fail=1

# GRESO prompt histories: keyed by the train file's ids.
keys=$($R --scan --pattern 'selroll:tt:prompt:*' | sed 's/^selroll:tt:prompt://' | sort)
train_ids=$("$PY" -c 'import json,sys; [print(json.loads(l)["id"]) for l in open(sys.argv[1]) if l.strip()]' \
  "$tmp/train.jsonl" | sort)
if [ -n "$keys" ] && [ -z "$(comm -23 <(echo "$keys") <(echo "$train_ids"))" ]; then
  ok "GRESO histories in Redis are keyed by the train file's ids: $(echo $keys)"
else
  bad "GRESO history keys '$(echo $keys)' are not the train file's ids '$(echo $train_ids)'"
fi

hits=$(grep -ril household "$out" "$tmp/run.out" "$tmp/run.err" 2>/dev/null)
[ -z "$hits" ] && ok "nothing in the run's outputs says household" ||
  bad "household in: $hits ($(grep -rih household $hits | head -2 | cut -c1-200))"

# ---- one run, two kinds of env worker ----------------------------------------------------------
# A task file whose lines name their env: "games" ones are served by the Python env worker, named
# as of kind games in --env-endpoints; "household" ones (the generated ids) by the launcher's own
# household env worker, which starts beside it. Every RESET must reach a worker of its task's env.
cat >"$tmp/mixed.jsonl" <<'EOF'
{"id": "copy-amber", "type": "copy", "env": "games", "word": "amber", "choices": ["amber", "birch"]}
{"id": "household/train/3", "type": "household", "env": "household"}
{"id": "guess-2of3", "type": "guess", "env": "games", "secret": 2, "hi": 3}
{"id": "household/train/8", "env": "household"}
{"id": "copy-cedar", "type": "copy", "env": "games", "word": "cedar", "choices": ["birch", "cedar"]}
{"id": "household/train/11", "env": "household"}
EOF
printf '{"id": "copy-x", "env": "cards", "word": "x", "choices": ["x"]}\n' >"$tmp/cards.jsonl"
"$S" run --run cards --out "$tmp/cards-out" --tasks-file "train=$tmp/cards.jsonl" --groups 1 \
  --env-endpoints "games=tcp://127.0.0.1:1" --http off >/dev/null 2>"$tmp/cards.err"
rc=$?
want='selroll run: --tasks-file: task "copy-x" names env "cards", but no --env-endpoints worker is of that kind (give it as cards=EP)'
[ $rc -eq 2 ] && [ "$(cat "$tmp/cards.err")" = "$want" ] && [ ! -e "$tmp/cards-out/logs" ] &&
  ok "a task env no env worker is of: exit 2 before starting, '$(cat "$tmp/cards.err")'" ||
  bad "task env without a worker: exit $rc, '$(cat "$tmp/cards.err")'"

printf '{"id": "copy-y", "env": "my games", "word": "y", "choices": ["y"]}\n' >"$tmp/badenv.jsonl"
"$S" run --run cards --out "$tmp/cards-out" --tasks-file "train=$tmp/badenv.jsonl" --groups 1 \
  --env-endpoints "games=tcp://127.0.0.1:1" --http off >/dev/null 2>"$tmp/badenv.err"
rc=$?
want='selroll run: --tasks-file: task "copy-y" names env "my games", which is not a kind name (1..64 bytes of A-Z a-z 0-9 _ . -)'
[ $rc -eq 2 ] && [ "$(cat "$tmp/badenv.err")" = "$want" ] && ok "a task env that is no kind name: exit 2, one line" ||
  bad "task env not a kind name: exit $rc, '$(cat "$tmp/badenv.err")'"

# A kind that is not a kind name is a one-line usage error wherever kinds are given.
kmsg="'my games' is not 1..64 bytes of A-Z a-z 0-9 _ . -"
emsg="'my games=tcp://127.0.0.1:1': the kind before '=' must be 1..64 bytes of A-Z a-z 0-9 _ . -"
for cmd in "env-worker --bind tcp://127.0.0.1:0 --capacity 1 --kind|my games|selroll env-worker: --kind: $kmsg" \
           "actor --coordinator tcp://127.0.0.1:1 --env-workers|my games=tcp://127.0.0.1:1|selroll actor: --env-workers: $emsg" \
           "run --http off --env-endpoints|my games=tcp://127.0.0.1:1|selroll run: --env-endpoints: $emsg"; do
  IFS='|' read -r args val want <<<"$cmd"
  # shellcheck disable=SC2086
  got=$("$S" $args "$val" 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] && [ "$got" = "$want" ] && ok "bad kind: $want" || bad "bad kind ($args): exit $rc, '$got'"
done

mport=$(free_port)
"$PY" tests/py_env_worker.py "tcp://127.0.0.1:$mport" "$tmp/mixed-resets.jsonl" 2>"$tmp/pymixed.err" &
pids+=($!)
wait_port "$mport" || { bad "the second Python env worker did not start: $(cat "$tmp/pymixed.err")"; exit 1; }
mout="$tmp/mixed-out"
start=$(date +%s)
timeout 90 "$S" run --run mx --redis "$RURL" --out "$mout" --iters 1 --groups 6 --tasks 6 \
  --group-size 2 --tasks-file "train=$tmp/mixed.jsonl" --env-endpoints "games=tcp://127.0.0.1:$mport" \
  --env-workers 1 --actors 1 --slots 6 --max-steps 4 --no-gate --http off --time-scale 20 \
  --grace-ms 1000 >"$tmp/mixed.out" 2>"$tmp/mixed.err"
rc=$?
took=$(( $(date +%s) - start ))
[ $rc -eq 0 ] && ok "a run mixing a games and a household env worker finished in ${took}s" || {
  bad "the mixed run exited $rc after ${took}s"; tail -5 "$tmp/mixed.err"; }
grep -q "1 env workers of kind household and env workers at games=tcp://127.0.0.1:$mport" "$tmp/mixed.out" &&
  ok "the launcher started its own household env worker beside the games one" ||
  bad "the mixed run's first line: $(head -1 "$tmp/mixed.out")"
# check_mixed LABEL RESETS_LOG OUT ENVW_LOG...: every RESET of the run in OUT reached a worker of
# its task's env: the Python worker's RESETs (RESETS_LOG) are the games trajectories, the household
# env workers' closing lines ("... N requests, R resets, ... bad_task=B ...") count the others.
cat >"$tmp/check_mixed.py" <<'EOF'
import json, sys
label = sys.argv[6]
lines = {o["id"]: o for o in (json.loads(l) for l in open(sys.argv[1]) if l.strip())}
resets = [json.loads(l) for l in open(sys.argv[2])]
results = [json.loads(l) for l in open(sys.argv[3]) if l.strip()]
hresets, hbadtask = int(sys.argv[4]), int(sys.argv[5])
fail = []
def check(cond, good, badmsg):
    print(("ok   " + label + good) if cond else ("FAIL " + label + badmsg))
    if not cond:
        fail.append(badmsg)
games = [r for r in results if lines[r["task"]]["env"] == "games"]
house = [r for r in results if lines[r["task"]]["env"] == "household"]
check(len(games) == 6 and len(house) == 6, "6 games and 6 household trajectories in the round",
      f"{len(games)} games and {len(house)} household trajectories, want 6 and 6")
wrong = [r["task"] for r in resets if lines.get(r["task"], {}).get("env") != "games"]
check(resets and not wrong, f"the games env worker got {len(resets)} RESETs, every one a games task",
      f"RESETs of other envs at the games worker: {wrong[:3]}")
check(all(r["task_data"] == lines[r["task"]] for r in resets),
      "each with its line as task_data", "a games RESET without its line")
check(len(resets) == len(games), "one RESET there per games trajectory",
      f"{len(resets)} RESETs for {len(games)} games trajectories")
check(hresets == len(house) and hbadtask == 0,
      f"the household env worker served {hresets} RESETs, one per household trajectory, no bad_task",
      f"household env worker: {hresets} resets, {hbadtask} bad_task, for {len(house)} trajectories")
failed = [(r["task"], r.get("error")) for r in results if r["status"] == "failed"]
check(not failed, "no trajectory failed", f"failed: {failed[:3]}")
check(all(r["n_steps"] > 0 for r in house), "the household tasks given by id in a file were played",
      "a household trajectory took no step")
sys.exit(1 if fail else 0)
EOF
check_mixed() {
  local label=$1 resets=$2 out=$3; shift 3
  local hr hb
  hr=$(sed -n 's/.* requests, \([0-9]*\) resets, .*/\1/p' "$@" | awk '{s+=$1} END {print s+0}')
  hb=$(grep -ho 'bad_task=[0-9]*' "$@" | cut -d= -f2 | awk '{s+=$1} END {print s+0}')
  "$PY" "$tmp/check_mixed.py" "$tmp/mixed.jsonl" "$resets" "$out/rounds/round-0.jsonl" "$hr" "$hb" \
    "$label" || fail=1
}
check_mixed "" "$tmp/mixed-resets.jsonl" "$mout" "$mout"/logs/env-worker-*.log

# ---- the same mix from the registry ----------------------------------------------------------
# No list of env workers anywhere: the built-in env worker (kind household by default) and the
# Python one (HSET/PEXPIRE over a plain socket, kind games) register in Redis, and the coordinator
# names both, with their kinds, in WELCOME; each RESET still reaches a worker of its env.
gport=$(free_port); hport=$(free_port); wport=$(free_port); pport=$(free_port)
"$PY" tests/py_env_worker.py "tcp://127.0.0.1:$gport" "$tmp/reg-resets.jsonl" "127.0.0.1:$rport" rg \
  py-1 games 2>"$tmp/pyreg.err" &
pids+=($!)
"$S" env-worker --bind "tcp://127.0.0.1:$hport" --capacity 64 --redis "$RURL" --run rg --id hh-1 \
  >"$tmp/reg-envw.log" 2>&1 &
envw=$!; pids+=($envw)
"$S" policy-server --listen "127.0.0.1:$pport" --time-scale 20 >"$tmp/reg-policy.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  [ "$($R --scan --pattern 'selroll:rg:envw:*' | wc -l)" -eq 2 ] && break; sleep 0.05
done
kinds="$($R hget selroll:rg:envw:py-1 kind) $($R hget selroll:rg:envw:hh-1 kind)"
[ "$kinds" = "games household" ] && ok "registry: the Python worker as games, the built-in one as household" ||
  bad "registry kinds: '$kinds' ($(cat "$tmp/pyreg.err"))"
rout="$tmp/reg-out"
timeout 60 "$S" coordinator --redis "$RURL" --run rg --work-bind "tcp://127.0.0.1:$wport" \
  --bus-pub-bind "tcp://127.0.0.1:$(free_port)" --bus-sub-bind "tcp://127.0.0.1:$(free_port)" \
  --http off --groups 6 --iters 1 --tasks 6 --group-size 2 --max-steps 4 \
  --tasks-file "train=$tmp/mixed.jsonl" --out "$rout" >"$tmp/reg-coord.log" 2>&1 &
coord=$!
"$S" actor --coordinator "tcp://127.0.0.1:$wport" --id reg-actor --slots 6 \
  --policy "http://127.0.0.1:$pport" >"$tmp/reg-actor.log" 2>&1 &
actor=$!; pids+=($actor)
wait $coord
rc=$?
st=$("$S" status --redis "$RURL" --run rg 2>&1) # the workers are still registered
kill $actor $envw 2>/dev/null; wait $actor $envw 2>/dev/null
grep -Eq "py-1 .*kind games" <<<"$st" && grep -Eq "hh-1 .*kind household" <<<"$st" &&
  ok "registry: selroll status shows each env worker's kind" ||
  bad "registry: selroll status: $(grep -A3 'env workers' <<<"$st" || head -3 <<<"$st")"
[ $rc -eq 0 ] && ok "registry: the coordinator's round finished" ||
  bad "registry: the coordinator exited $rc: $(tail -3 "$tmp/reg-coord.log")"
grep -q "env worker tcp://127.0.0.1:$gport (games)" "$tmp/reg-actor.log" &&
  grep -q "env worker tcp://127.0.0.1:$hport (household)" "$tmp/reg-actor.log" &&
  ok "registry: WELCOME gave the actor both workers with their kinds" ||
  bad "registry: the actor's env workers: $(grep 'env worker' "$tmp/reg-actor.log" | head -3)"
check_mixed "registry: " "$tmp/reg-resets.jsonl" "$rout" "$tmp/reg-envw.log"

exit $fail
