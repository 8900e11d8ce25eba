#!/usr/bin/python3
"""env_worker.py — a small env worker in Python, a user of the selroll package (python/selroll).

It hosts a toy environment, the counter game: task "counter/<n>" (n from 1 to 99) shows a counter
at 0 and asks the agent to make it show n. The commands are "press up", "press down" (only above
0) and "look". Pressing to n wins with reward 1. Any other command reads "Nothing happens." and
still counts as a step.

All of the env channel (sessions, capacity, rids, every ERROR code, CURVE, the Redis registry,
SIGTERM) is selroll.EnvWorker's: this file is the game and nothing else. A task id it cannot
play makes reset() raise, which the actor gets as ERROR bad_task.

    python3 docs/examples/env_worker.py --bind tcp://127.0.0.1:5561 --capacity 64
    # the same, without the main code below:
    PYTHONPATH=python:docs/examples python3 -m selroll.env_worker env_worker:Counter --bind ...
"""
import os
import sys

try:
    import selroll
except ImportError:  # run from a checkout, without `pip install ./python`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import selroll


class Counter(selroll.EnvWorker):
    """The counter game for one session (one instance per session, reset for each episode)."""

    def reset(self, task_id, task_data):
        name, _, n = task_id.partition("/")
        if name != "counter" or not n.isdigit() or not 1 <= int(n) <= 99:
            raise ValueError("bad task id %r: expected counter/<1..99>" % task_id)
        self.target, self.value = int(n), 0
        goal = "make the counter show %d." % self.target
        return ("You are in front of a counter. It shows 0.\n\nYour task is to: %s" % goal,
                self.admissible(), {"goal": goal})

    def admissible(self):
        return sorted(["look", "press up"] + (["press down"] if self.value > 0 else []))

    def step(self, action):
        if action not in self.admissible():
            return "Nothing happens.", 0.0, False, False, self.admissible()
        if action == "look":
            return "The counter shows %d." % self.value, 0.0, False, False, self.admissible()
        self.value += 1 if action == "press up" else -1
        won = self.value == self.target
        return ("You press the button. The counter shows %d." % self.value, float(won), won, won,
                self.admissible())


if __name__ == "__main__":
    from selroll.env_worker import main
    # --bind, --capacity, --kind, --redis, --curve-keys, ... (--help)
    sys.exit(main(env_class=Counter, prog="env_worker.py",
                  description="A toy env worker (the counter game) in Python."))
