"""The per-iteration table of a `selroll run --policy neural` training run (docs/neural.md):
python3 scripts/neural_run_table.py OUT"""
import json, re, datetime, sys
d = sys.argv[1]
its = [json.loads(l) for l in open(d + "/iterations.jsonl")]
tr = [json.loads(l) for l in open(d + "/neural-train.jsonl")]
ts = lambda s: datetime.datetime.strptime(s[:23], "%Y-%m-%dT%H:%M:%S.%f")
ask, load = {}, {}
for l in open(d + "/logs/coordinator.log"):
    m = re.search(r"asked 1 server to load version (\d+)", l)
    if m: ask[int(m.group(1))] = ts(l)
    m = re.search(r"loaded version (\d+)", l)
    if m: load[int(m.group(1))] = ts(l)
print("| iteration | version | rollout s (wall_ms) | batch groups | trained sequences / tokens | training s | weight load s | first-minibatch mean abs(ratio-1) |")
print("|---|---|---|---|---|---|---|---|")
for it in [x for x in its if x["type"] == "iteration"]:
    r = [t for t in tr if t["iteration"] == it["iteration"]]
    if not r: continue
    r = r[-1]; v = r["version"]
    ld = (load[v] - ask[v]).total_seconds() if v in load and v in ask else float("nan")
    print("| %d | %d->%d | %.1f | %d | %d / %d | %.1f | %.2f | %.1e |" % (it["iteration"], it["policy_version"], v,
          it.get("wall_ms", 0) / 1000, it["batch_groups"], r["sequences"], r["tokens"], r["train_s"], ld, r["ratio_dev"]))
for e in [x for x in its if x["type"] == "eval"]:
    print("held-out at version %d (iteration %d): %.1f%% (%d/%d)" % (e["policy_version"], e["iteration"], 100 * e["heldout_success"], e["won"], e["tasks"]))
