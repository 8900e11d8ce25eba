#!/usr/bin/python3
"""bench_env_worker.py: requests per second of a Python env worker (tests/games.py's copy game,
served by `python3 -m selroll.env_worker`) on loopback, from one DEALER with 1 and with 16
sessions' requests in flight. Not a test: a figure for docs/performance.md ("Env worker").

    PYTHONPATH=python python3 python/tests/bench_env_worker.py [--steps N]
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time

import msgpack
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
TASK = {"id": "copy-amber", "type": "copy", "word": "amber", "choices": ["amber", "birch", "cedar"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20000)
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE]))
    w = subprocess.Popen([sys.executable, "-m", "selroll.env_worker", "games:Games", "--bind",
                          "tcp://127.0.0.1:%d" % port, "--log-level", "warn"], env=env, cwd=HERE)
    ctx = zmq.Context()
    d = ctx.socket(zmq.DEALER)
    d.connect("tcp://127.0.0.1:%d" % port)
    rid = 0
    try:
        for inflight in (1, 16):
            for k in range(inflight):
                rid += 1
                d.send(msgpack.packb({"t": "RESET", "v": 1, "rid": rid, "session": "s%d" % k,
                                      "task": "copy-amber", "task_data": TASK, "max_steps": 1 << 40}))
                assert d.poll(10000), "no answer"
                d.recv()
            t0 = time.perf_counter()
            sent = got = 0
            while got < a.steps:
                while sent < a.steps and sent - got < inflight:
                    rid += 1
                    d.send(msgpack.packb({"t": "STEP", "v": 1, "rid": rid,
                                          "session": "s%d" % (sent % inflight), "action": "look"}))
                    sent += 1
                d.recv()
                got += 1
            dt = time.perf_counter() - t0
            print("%2d in flight: %d STEPs in %.2f s: %.0f per second, %.0f us each"
                  % (inflight, a.steps, dt, a.steps / dt, dt / a.steps * 1e6))
    finally:
        w.send_signal(signal.SIGTERM)
        w.wait(10)
        d.close(0)
        ctx.term()


if __name__ == "__main__":
    main()
