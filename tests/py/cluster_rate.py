#!/usr/bin/python3
"""cluster_rate.py — step throughput from a bus recording of tests/rollout_bus.py.

Counts the ACTION messages (one per environment step) received in a window of the recorder's
clock (time.monotonic(), the same clock in every network namespace) and prints the rate.

    python3 tests/py/cluster_rate.py --bus bus.jsonl --from 1234.5 --to 1237.5
    -> "steps 312 in 3.00 s: 104.0 steps/s, 4 actors"

--actors-only A,B counts only the ACTIONs of those actor ids. Exits 1 when the file is unreadable.
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bus", required=True)
    ap.add_argument("--from", dest="t0", type=float, required=True)
    ap.add_argument("--to", dest="t1", type=float, required=True)
    ap.add_argument("--actors-only")
    a = ap.parse_args()
    only = set(a.actors_only.split(",")) if a.actors_only else None
    n = 0
    actors = set()
    try:
        with open(a.bus) as f:
            for line in f:
                if not line.strip():
                    continue
                m = json.loads(line)
                if m.get("t") != "ACTION" or not (a.t0 <= m["recv"] < a.t1):
                    continue
                if only is not None and m.get("actor_id") not in only:
                    continue
                n += 1
                actors.add(m.get("actor_id"))
    except (OSError, ValueError) as e:
        print("cluster_rate: %s: %s" % (a.bus, e), file=sys.stderr)
        return 1
    span = max(a.t1 - a.t0, 1e-9)
    print("steps %d in %.2f s: %.1f steps/s, %d actors" % (n, span, n / span, len(actors)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
