#!/usr/bin/python3
"""rollout_check.py — checks one finished round of an end-to-end run, independently of the C code.

Reads the round's results (rounds/round-<r>.jsonl, one RESULT per line), the group records in
Redis (through redis-cli) and, when given, the bus recording of tests/rollout_bus.py. Prints one
line per check ("ok ..." / "FAIL ...") and exits 1 when any check failed.

Checks:
  results    every group has exactly G final results, one per trajectory, no duplicates
  spread     each group's trajectories ran on more than one actor (from ACTION.actor_id)
  gate       d_K recomputed from the recorded action sequences (first K actions of each
             trajectory, <END> after an episode that ended by step K) equals the d in Redis, and
             the decision follows the rule of the mode:
               enforce  cancel iff d < threshold (or ended share >= t_high); a cancelled group's
                        status is cancelled unless it had finished first
               shadow   same decisions, no group cancelled, no CANCEL on the bus
               off      nothing recorded
  latency    for each CANCEL: from the ACTION that completed step K for the group (the last
             step-K ACTION, or the ending ACTION of a trajectory that ended before K) to the
             later of the CANCEL and the group's last ACTION on the bus; p99 < --latency-ms
"""
import argparse
import json
import subprocess
import sys

FAILED = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILED.append(what)


def norm(s):
    return " ".join(s.strip().lower().split())


def lev(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def d_k(seqs, k):
    cut = [(s[:k] + ["<END>"] * k)[:k] for s in seqs]
    g = len(cut)
    if g < 2:
        return 0.0
    tot, n = 0.0, 0
    for i in range(g):
        for j in range(i + 1, g):
            tot += lev(cut[i], cut[j]) / k
            n += 1
    return tot / n


def hgetall(url, key):
    out = subprocess.run(["redis-cli", "-u", url, "--raw", "HGETALL", key],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    out = [x for x in out]
    if out and out[-1] == "":
        out.pop()
    return dict(zip(out[0::2], out[1::2]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jsonl", required=True)
    ap.add_argument("--redis", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--groups", type=int, required=True)
    ap.add_argument("--G", type=int, required=True)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--threshold", type=float, default=0.12)
    ap.add_argument("--t-high", type=float, default=0.0)
    ap.add_argument("--mode", choices=["enforce", "shadow", "off", "none"], default="enforce")
    ap.add_argument("--bus")
    ap.add_argument("--spread", action="store_true")
    ap.add_argument("--latency-ms", type=float, default=20.0,
                    help="the p99 cancel latency limit; 0 reports it without checking")
    ap.add_argument("--skip-gate", action="store_true", help="the gate was disturbed: no recompute")
    a = ap.parse_args()

    finals = {}
    seen = {}
    with open(a.jsonl) as f:
        for line in f:
            r = json.loads(line)
            key = (r["group"], r["traj"])
            ident = (r["job_id"], r["epoch"])
            if r["status"] == "failed":
                continue
            if ident in seen.setdefault(key, set()):
                continue  # the same result stored twice (lost acknowledgement): one counts
            seen[key].add(ident)
            finals.setdefault(r["group"], {}).setdefault(r["traj"], []).append(r)
    check(len(finals) == a.groups, "results: %d groups in the round file (want %d)" % (len(finals), a.groups))
    bad = [g for g, t in finals.items()
           if sorted(t) != list(range(a.G)) or any(len(v) != 1 for v in t.values())]
    check(not bad, "results: every group has exactly G=%d final results, no duplicates%s"
          % (a.G, (" (bad: %s)" % bad[:5]) if bad else ""))

    bus = []
    if a.bus:
        with open(a.bus) as f:
            bus = [json.loads(x) for x in f if x.strip()]
    acts = [m for m in bus if m.get("t") == "ACTION"]
    cancels = [m for m in bus if m.get("t") == "CANCEL"]
    if a.spread:
        by = {}
        for m in acts:
            by.setdefault(m["group"], set()).add(m.get("actor_id"))
        one = [g for g in finals if len(by.get(g, ())) < 2]
        check(not one, "spread: every group's trajectories ran on more than one actor%s"
              % ((" (single-actor: %s)" % one[:5]) if one else ""))

    groups = {g: hgetall(a.redis, "selroll:%s:group:%s" % (a.run, g)) for g in finals}
    if a.mode == "off" or a.mode == "none":
        rec = [g for g, h in groups.items() if h.get("decision") or h.get("gate_mode")
               or float(h.get("d", "-1")) >= 0]
        check(not rec, "gate %s: no decision recorded for any group" % a.mode)
        check(not cancels, "gate %s: no CANCEL on the bus" % a.mode)
        check(all(h.get("status") != "cancelled" for h in groups.values()),
              "gate %s: no group cancelled" % a.mode)
    elif not a.skip_gate:
        wrong = []
        ncancel = 0
        for g, trajs in sorted(finals.items()):
            res = [trajs[t][0] for t in range(a.G)]
            seqs = [[norm(s["action"]) for s in r.get("steps", [])] for r in res]
            ended = [r["status"] != "cancelled" and r["n_steps"] <= a.k for r in res]
            d = d_k(seqs, a.k)
            share = sum(ended) / a.G
            if all(ended):
                want = "ended_before_k"
            elif d < a.threshold or (a.t_high > 0 and share >= a.t_high):
                want = "cancel"
            else:
                want = "keep"
            h = groups[g]
            got_d = float(h.get("d", "-1"))
            if h.get("decision") != want or abs(got_d - d) > 1e-9 or int(h.get("step", "-1")) != a.k:
                wrong.append("%s: redis d=%s decision=%s step=%s, recomputed d=%.6f %s"
                             % (g, h.get("d"), h.get("decision"), h.get("step"), d, want))
            if want == "cancel":
                ncancel += 1
                if a.mode == "enforce" and h.get("status") not in ("cancelled", "done"):
                    wrong.append("%s: decision cancel but status %s" % (g, h.get("status")))
            if a.mode == "shadow" and h.get("status") == "cancelled":
                wrong.append("%s: cancelled in shadow mode" % g)
        check(not wrong, "gate %s: d_K and decision of all %d groups equal the recomputation "
              "(%d cancel decisions)" % (a.mode, len(finals), ncancel))
        for w in wrong[:10]:
            print("     " + w)
        if a.mode == "shadow":
            check(not cancels, "gate shadow: no CANCEL on the bus")
    if cancels and a.bus:
        lat = []
        for c in cancels:
            g = c["group"]
            ga = [m for m in acts if m["group"] == g]
            trig = 0.0
            for t in range(a.G):
                ta = [m for m in ga if m["traj"] == t and
                      (m["step"] == a.k or (m.get("ended") and m["step"] <= a.k))]
                if ta:
                    trig = max(trig, max(m["recv"] for m in ta))
            last = max([m["recv"] for m in ga] + [c["recv"]])
            lat.append((last - trig) * 1000.0)
        lat.sort()
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        med = lat[len(lat) // 2]
        if a.latency_ms > 0:
            check(p99 < a.latency_ms, "latency: cancel latency over %d CANCELs median %.2f ms p99 "
                  "%.2f ms (limit %.0f ms)" % (len(lat), med, p99, a.latency_ms))
        else:
            print("info latency: cancel latency over %d CANCELs median %.2f ms p99 %.2f ms (not "
                  "checked in this run)" % (len(lat), med, p99))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
