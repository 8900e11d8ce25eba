#!/usr/bin/env bash
# it_household.sh: the `selroll env` tools from the outside. The expert's transcript is won; piping
# the expert's actions into `env play` reaches the same end; `env show` prints the layout; bad ids
# and bad options exit 2 with a message.
set -u
cd "$(dirname "$0")/.."
S=bin/selroll
fail=0
id=household/valid_unseen/17
out=$(timeout 10 $S env expert $id) || { echo "env expert failed"; fail=1; }
tail -1 <<<"$out" | grep -q '^-- won after [0-9]* steps, reward 1$' || { echo "expert did not win $id"; fail=1; }
steps=$(tail -1 <<<"$out" | sed 's/^-- won after \([0-9]*\) steps.*/\1/')
play=$(grep '^> ' <<<"$out" | sed 's/^> //' | timeout 10 $S env play $id) || { echo "env play failed"; fail=1; }
grep -q "^Episode over: won after $steps steps, reward 1.$" <<<"$play" || { echo "replay did not win in $steps steps"; fail=1; }
grep -q '^Admissible commands:$' <<<"$play" || { echo "play prints no admissible list"; fail=1; }
echo "dance" | timeout 10 $S env play $id | grep -q '^Nothing happens.$' || { echo "play: no Nothing happens."; fail=1; }
$S env show $id | grep -q '^receptacles:$' || { echo "env show prints no receptacles"; fail=1; }
$S env expert $id --admissible | grep -q '^admissible: ' || { echo "--admissible prints no lists"; fail=1; }
$S env expert $id --max-steps 1 | tail -1 | grep -q 'not won after 1 steps' || { echo "--max-steps ignored"; fail=1; }
$S env show household/nope/1 2>/dev/null; [ $? -eq 2 ] || { echo "bad id must exit 2"; fail=1; }
$S env show household/nope/1 2>&1 | grep -q "bad task id" || { echo "bad id must say why"; fail=1; }
$S env expert $id --max-steps x 2>/dev/null; [ $? -eq 2 ] || { echo "bad --max-steps must exit 2"; fail=1; }
$S env 2>/dev/null; [ $? -eq 2 ] || { echo "no arguments must exit 2"; fail=1; }
$S env --help | grep -q '^usage: selroll env' || { echo "env --help"; fail=1; }
[ $fail -eq 0 ] && echo "env expert wins $id in $steps steps, env play replays it, env show and errors behave"
exit $fail
