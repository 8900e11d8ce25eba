#!/usr/bin/env bash
# it_experiment.sh: `selroll experiment --quick` end to end (real `selroll run` children, each
# with its private redis-server): it exits 0 and writes report.md with every section, summary.csv
# with every figure of every arm present and finite, iterations.csv, heldout.csv, sweep.csv and
# four SVG plots. Then --report-only rebuilds the report with another --sweep-threshold without
# a new rollout, and skips a gate-rule arm cleanly when `selroll run` has no --gate-rule. Bad
# flags exit 2 with one line. It checks that the figures exist and are finite, not their values.
set -u
ROOT=$(cd "$(dirname "$0")" && while [ ! -f Makefile ] && [ "$PWD" != / ]; do cd ..; done; pwd)
cd "$ROOT"
S="$ROOT/bin/selroll"
T=$(mktemp -d /tmp/selroll-it-experiment-XXXXXX)
fail=0
cleanup() { rm -rf "$T"; }
trap cleanup EXIT
bad() { echo "FAIL $*"; fail=1; }
ok() { echo "ok   $*"; }

"$S" experiment --help | grep -q '^usage: selroll experiment' && ok "experiment --help" \
  || bad "experiment --help"
for args in "--arms baseline,nope" "--sweep-threshold 0.3:0.1:0.1" "--seeds 1,x" "--iters 0"; do
  # shellcheck disable=SC2086
  out=$("$S" experiment $args --out "$T/bad" 2>&1); rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && ok "experiment $args: exit 2, one line" \
    || bad "experiment $args: rc=$rc out=$out"
done

start=$(date +%s)
timeout 290 "$S" experiment --quick --out "$T/q" >"$T/quick.txt" 2>&1; rc=$?
secs=$(( $(date +%s) - start ))
[ $rc -eq 0 ] && ok "experiment --quick: exit 0 in ${secs} s" \
  || { bad "experiment --quick: rc=$rc after ${secs} s"; tail -20 "$T/quick.txt"; \
       for f in "$T"/q/arms/*/*.log; do echo "== $f"; tail -5 "$f"; done; }

R="$T/q/report.md"
for sec in "## What was run" "## Machine" "## Cost" "## Groups" "## Gate precision and recall" \
           "## Quality" "## Threshold sweep" "## Gate rules" "## Targets" "## Plots"; do
  grep -qF "$sec" "$R" 2>/dev/null || bad "report.md lacks '$sec'"
done
grep -qF -- "--quick" "$R" 2>/dev/null && ok "report.md: every section, the exact command" \
  || bad "report.md lacks the command"
grep -qiE '(^|[^a-z])(nan|inf)([^a-z]|$)' "$R" && bad "report.md has a non-finite figure"

# every figure of every arm in summary.csv, finite
metrics="wall_s wall_ratio run_wall_s llm_calls gen_tokens aborted_tokens batch_groups
s_per_batch_group s_per_batch_group_ratio groups_started
groups_skipped groups_cancelled groups_filtered cut_share zv_share dilution train_success
heldout_first heldout_end heldout_diff"
gate_metrics="gate_precision gate_recall gate_cut_share oracle_ceiling oracle_recovered"
missing=0
for m in $metrics; do
  for arm in baseline gate; do grep -q "^$arm,$m,1," "$T/q/summary.csv" || { bad "summary.csv: no $arm $m"; missing=1; }; done
done
for m in $gate_metrics; do
  grep -q "^gate,$m,1," "$T/q/summary.csv" || { bad "summary.csv: no gate $m"; missing=1; }
done
[ $missing -eq 0 ] && ok "summary.csv: every figure of both arms"
/usr/bin/python3 - "$T/q" <<'PY' && ok "summary.csv, iterations.csv, heldout.csv, sweep.csv: finite numbers" || bad "CSV check"
import csv, math, sys
d = sys.argv[1]
for name, skip in (("summary.csv", 2), ("iterations.csv", 1), ("heldout.csv", 1), ("sweep.csv", 0)):
    rows = list(csv.reader(open(f"{d}/{name}")))
    assert len(rows) > 1, f"{name}: no rows"
    for r in rows[1:]:
        for v in r[skip:]:
            x = float(v)
            assert math.isfinite(x), f"{name}: {r}"
rows = list(csv.reader(open(f"{d}/heldout.csv")))[1:]
assert {r[0] for r in rows} == {"baseline", "gate"} and len(rows) >= 4, "heldout.csv: evaluations"
PY
for p in wall_clock heldout dk_histogram precision_recall; do
  f="$T/q/plots/$p.svg"
  { head -c 5 "$f" | grep -q '<svg' && tail -1 "$f" | grep -q '</svg>'; } 2>/dev/null \
    || bad "plot $p.svg"
done
ok "plots: four SVG files"

# the sweep mode: no new rollouts
before=$(find "$T/q/arms" -newer "$R" -type f | wc -l)
"$S" experiment --report-only --out "$T/q" --arms baseline,gate,learned \
  --sweep-threshold 0.05:0.30:0.05 >"$T/ro.txt" 2>&1; rc=$?
after=$(find "$T/q/arms" -newer "$R" -type f | wc -l)
[ $rc -eq 0 ] && ! grep -q '^start' "$T/ro.txt" && [ "$before" -eq "$after" ] \
  && [ "$(tail -n +2 "$T/q/sweep.csv" | wc -l)" -eq 6 ] && grep -q '^0.3000,' "$T/q/sweep.csv" \
  && ok "--report-only --sweep-threshold 0.05:0.30:0.05: 6 thresholds, no run started" \
  || { bad "--report-only: rc=$rc"; cat "$T/ro.txt"; }
if "$S" run --help | grep -q -- '--gate-rule'; then
  ok "selroll run has --gate-rule: the learned arm is not skipped"
else
  grep -q 'skipping arm learned' "$T/ro.txt" && grep -q 'skipped: ' "$R" \
    && ok "the learned arm is skipped with a clear message (no --gate-rule)" \
    || bad "no skip message for the learned arm"
fi

[ $fail -eq 0 ] && echo "it_experiment: all checks passed" || echo "it_experiment: FAILED"
exit $fail
