#!/usr/bin/python3
"""exactly_once.py — a run's groups and stored results in Redis, checked after the fact.

  exactly_once.py --port P --run RUN --rounds N --groups K --size G [--cancelled GID,...]

For every round r < N: K groups in groups:<r>; K x G copies in results:<r>, one per job id, each
under the epoch final:<r> names for it (K x G entries); every group done with G finished (the
--cancelled ones: cancelled, G finished). Talks RESP to the private redis-server on 127.0.0.1:P.
Prints one line per problem and exits 1 when there is one.
"""
import argparse
import socket
import sys

import msgpack


def connect(port):
    s = socket.create_connection(("127.0.0.1", port))
    f = s.makefile("rb")

    def cmd(*a):
        a = [x.encode() if isinstance(x, str) else x for x in a]
        s.sendall(b"".join([b"*%d\r\n" % len(a)] + [b"$%d\r\n%s\r\n" % (len(x), x) for x in a]))
        return rd()

    def rd():
        line = f.readline()
        k, rest = line[:1], line[1:].strip()
        if k == b"*":
            n = int(rest)
            return None if n < 0 else [rd() for _ in range(n)]
        if k == b"$":
            n = int(rest)
            return None if n < 0 else f.read(n + 2)[:-2]
        if k == b":":
            return int(rest)
        if k == b"-":
            raise RuntimeError(rest.decode())
        return rest
    return cmd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--groups", type=int, required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--cancelled", default="")
    a = ap.parse_args()
    cancelled = set(x for x in a.cancelled.split(",") if x)
    cmd = connect(a.port)
    k = "selroll:%s:" % a.run
    bad = []
    for r in range(a.rounds):
        gids = sorted(x.decode() for x in cmd("SMEMBERS", k + "groups:%d" % r))
        if len(gids) != a.groups:
            bad.append("round %d: %d groups" % (r, len(gids)))
        res = cmd("LRANGE", k + "results:%d" % r, "0", "-1")
        fin = cmd("HGETALL", k + "final:%d" % r)
        final = {fin[i].decode(): int(fin[i + 1]) for i in range(0, len(fin), 2)}
        if len(res) != a.groups * a.size:
            bad.append("round %d: %d stored results" % (r, len(res)))
        if len(final) != a.groups * a.size:
            bad.append("round %d: %d final epochs" % (r, len(final)))
        seen = {}
        for b in res:
            m = msgpack.unpackb(b, raw=False)
            if m["job_id"] in seen:
                bad.append("job %s stored twice (epochs %s, %s)" % (m["job_id"], seen[m["job_id"]],
                                                                   m["epoch"]))
            seen[m["job_id"]] = m["epoch"]
            if final.get(m["job_id"]) != m["epoch"]:
                bad.append("job %s: stored epoch %s, final %s" % (m["job_id"], m["epoch"],
                                                                 final.get(m["job_id"])))
        for gid in gids:
            st, n = cmd("HMGET", k + "group:" + gid, "status", "finished")
            want = "cancelled" if gid in cancelled else "done"
            if (st or b"").decode() != want or int(n or 0) != a.size:
                bad.append("group %s: %s, finished %s (want %s, %d)" % (gid, st, n, want, a.size))
    for line in bad:
        print(line)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
