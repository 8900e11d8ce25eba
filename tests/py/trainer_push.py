#!/usr/bin/python3
"""trainer_push.py — the coordinator's side of the trainer channel, written from docs/protocol.md.

It records real household episodes through an env worker (RESET/STEP over the env channel), renders
every step's prompt with the default template of docs/prompt.md (the text the policy would have
seen), builds BATCHes with GRPO advantages and PUSHes them to a trainer, and checks the
WEIGHTS_READY acks that come back on its PULL socket.

  trainer_push.py --env EP --trainer EP --acks EP --run RUN scenario [--save FILE]
      garbage (no ack), a wrong-shape BATCH and one without messages (refused acks: ok false and
      the reason), iteration 0 (version 1), iteration 0 again (a batch sent twice: acked again
      with version 1, not trained), iteration 1 (version 2), iteration 0 once more (now an
      earlier iteration: refused). --save writes the good batch (msgpack) for `send`.
  trainer_push.py --trainer EP --acks EP send FILE --expect-version N
      pushes a saved BATCH and checks that its ack names version N.

In each episode trajectory 0 follows the scripted expert (`selroll env expert`), the others take
seeded random admissible actions, so groups have both outcomes. Exit 0 when every check held, 1
otherwise (one line on stderr says which), 2 for usage.
"""
import argparse
import random
import subprocess
import sys

import msgpack
import zmq

SYSTEM = "You are an expert agent operating in the ALFRED embodied household environment."
USER_TAIL = ("Now it's your turn to take an action.\n"
             "You should first reason step-by-step about the current situation. This reasoning "
             "process MUST be enclosed within <think> </think> tags.\n"
             "Once you've finished your reasoning, you should choose an admissible action for "
             "current step and present it within <action> </action> tags.")
HISTORY = 2
WAIT_MS = 10000


class Check(Exception):
    pass


def render_user(goal, history, current_obs, admissible):
    """The default user template of docs/prompt.md."""
    n_prev = len(history)
    shown = history[-HISTORY:] if HISTORY > 0 else []
    first = n_prev - len(shown) + 1
    out = "Your task is to: %s\n" % goal
    if not shown:
        out += "This is the first step.\n"
    else:
        out += ("Prior to this step, you have already taken %d step(s). Below are the most recent "
                "%d observations and the corresponding actions you took:\n" % (n_prev, len(shown)))
        out += "\n".join("[Observation %d: '%s', Action %d: '%s']" % (first + i, o, first + i, a)
                         for i, (o, a) in enumerate(shown)) + "\n"
    out += "You are now at step %d and your current observation is: %s\n" % (n_prev + 1, current_obs)
    adm = [a for a in admissible if a != "help"]
    out += "Your admissible actions of the current situation are: [%s].\n\n" % ", ".join(
        "'%s'" % a for a in adm)
    return out + USER_TAIL


class Env:
    def __init__(self, ctx, endpoint):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.rid = 0

    def request(self, t, **fields):
        self.rid += 1
        self.sock.send(msgpack.packb({"t": t, "v": 1, "rid": self.rid, **fields}, use_bin_type=True))
        if not self.sock.poll(WAIT_MS):
            raise Check("env worker: no reply to %s" % t)
        m = msgpack.unpackb(self.sock.recv(), raw=False)
        if m.get("t") != "OBS" or m.get("rid") != self.rid:
            raise Check("env worker: unexpected reply %r" % m)
        return m


def expert_actions(selroll, task):
    out = subprocess.run([selroll, "env", "expert", task], capture_output=True, text=True,
                         timeout=20, check=True).stdout
    return [line[2:] for line in out.splitlines() if line.startswith("> ")]


def play(env, task, traj, run, group, actions, rng, max_steps):
    """One episode: RESULT map with recorded messages."""
    sess = "%s-%d" % (group, traj)
    o = env.request("RESET", session=sess, task=task, max_steps=max_steps)
    goal, cur, adm = o.get("goal", ""), o["obs"], o["admissible"]
    history, steps, won, reward = [], [], False, 0.0
    done = False
    while not done and len(steps) < max_steps:
        user = render_user(goal, history, cur, adm)
        if actions is not None and len(steps) < len(actions):
            act = actions[len(steps)]
        else:
            act = rng.choice([a for a in adm if a != "help"])
        o = env.request("STEP", session=sess, action=act)
        steps.append({"i": len(steps), "action": act, "raw": "<think>...</think><action>%s</action>" % act,
                      "obs": o["obs"], "reward": float(o["reward"]), "done": bool(o["done"]),
                      "prompt_tokens": len(user) // 4, "completion_tokens": 20, "format_error": False,
                      "latency_ms": 1.0,
                      "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]})
        history.append((cur, act))
        cur, adm, done, won, reward = o["obs"], o["admissible"], o["done"], o["won"], o["reward"]
    env.request("CLOSE", session=sess)
    return {"job_id": "%s/%d" % (group, traj), "epoch": 0, "run": run, "group": group, "task": task,
            "traj": traj, "status": "done", "reward": float(reward), "won": bool(won),
            "n_steps": len(steps), "llm_calls": len(steps),
            "prompt_tokens": sum(s["prompt_tokens"] for s in steps),
            "completion_tokens": 20 * len(steps), "wall_ms": 1, "steps": steps}


def make_batch(env, selroll, run, iteration, version, tasks, G, seed, max_steps):
    groups = []
    for gi, task in enumerate(tasks):
        rng = random.Random(seed * 1000 + gi)
        expert = expert_actions(selroll, task)
        group = "it%d-g%d" % (iteration, gi)
        trajs = [play(env, task, j, run, group, expert if j == 0 else None, rng, max_steps)
                 for j in range(G)]
        rewards = [t["reward"] for t in trajs]
        mean = sum(rewards) / G
        std = (sum((r - mean) ** 2 for r in rewards) / G) ** 0.5
        groups.append({"group": group, "task": task, "rewards": rewards,
                       "advantages": [(r - mean) / (std + 1e-6) for r in rewards], "trajectories": trajs})
    return {"t": "BATCH", "v": 1, "run": run, "iteration": iteration, "policy_version": version,
            "groups": groups, "stats": {"temperature": 0.7, "zv_ratio": 0.0}}


class Channel:
    def __init__(self, ctx, trainer, acks):
        self.push = ctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.LINGER, 1000)
        self.push.connect(trainer)
        self.pull = ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.LINGER, 0)
        self.pull.bind(acks)

    def send(self, body):
        self.push.send(body if isinstance(body, bytes) else msgpack.packb(body, use_bin_type=True))

    def ack(self, wait_ms=WAIT_MS):
        if not self.pull.poll(wait_ms):
            return None
        m = msgpack.unpackb(self.pull.recv(), raw=False)
        if m.get("t") != "WEIGHTS_READY":
            raise Check("expected WEIGHTS_READY, got %r" % m.get("t"))
        return m


def expect_trained(ch, version, iteration):
    a = ch.ack()
    if a is None:
        raise Check("no WEIGHTS_READY for iteration %d" % iteration)
    if a["version"] != version or a["iteration"] != iteration or "loss" not in a:
        raise Check("iteration %d: expected version %d with a loss, got %r" % (iteration, version, a))
    if "trained iteration" not in a.get("info", "") or " 0 skipped" not in a["info"]:
        raise Check("iteration %d: unexpected info %r" % (iteration, a.get("info")))
    return a


def expect_refused(ch, needle, version):
    a = ch.ack()
    if a is None:
        raise Check("no refusal ack (expected one mentioning %r)" % needle)
    info = a.get("info", "")
    if not info.startswith("refused: ") or needle not in info or a["version"] != version or "loss" in a:
        raise Check("expected a refusal mentioning %r at version %d, got %r" % (needle, version, a))
    if a.get("ok") is not False or needle not in a.get("reason", ""):
        raise Check("a refusal must carry ok false and the reason, got %r" % a)


def expect_acked_again(ch, version, iteration):
    a = ch.ack()
    if a is None:
        raise Check("no WEIGHTS_READY for iteration %d sent again" % iteration)
    if (a.get("ok") is not True or a["version"] != version or a["iteration"] != iteration
            or "loss" in a or "trained already" not in a.get("info", "")):
        raise Check("iteration %d sent again: expected ok true, version %d, no loss, got %r"
                    % (iteration, version, a))


def scenario(args, ctx):
    env = Env(ctx, args.env)
    ch = Channel(ctx, args.trainer, args.acks)
    tasks = ["household/train/3", "household/train/12", "household/train/21"]
    good = make_batch(env, args.selroll, args.run, 0, 0, tasks, 4, 1, 20)
    ch.send(b"\x93\x01\x02 this is no message")
    if ch.ack(700) is not None:
        raise Check("garbage was acknowledged")
    bad = msgpack.unpackb(msgpack.packb(good), raw=False)
    bad["groups"][1]["trajectories"].pop()
    ch.send(bad)
    expect_refused(ch, "groups[1] has 3 trajectories but 4 rewards", 0)
    bare = msgpack.unpackb(msgpack.packb(good), raw=False)
    for g in bare["groups"]:
        for t in g["trajectories"]:
            for s in t["steps"]:
                del s["messages"]
    ch.send(bare)
    expect_refused(ch, "carries no messages", 0)
    ch.send(good)
    a = expect_trained(ch, 1, 0)
    print("iteration 0 -> version 1, loss %.6g: %s" % (a["loss"], a["info"]))
    ch.send(good)
    expect_acked_again(ch, 1, 0)
    second = make_batch(env, args.selroll, args.run, 1, 1, tasks, 4, 2, 20)
    ch.send(second)
    a = expect_trained(ch, 2, 1)
    print("iteration 1 -> version 2, loss %.6g" % a["loss"])
    ch.send(good)
    expect_refused(ch, "already trained", 2)
    if args.save:
        with open(args.save, "wb") as f:
            f.write(msgpack.packb(good, use_bin_type=True))


def send(args, ctx):
    ch = Channel(ctx, args.trainer, args.acks)
    with open(args.file, "rb") as f:
        body = f.read()
    ch.send(body)
    a = ch.ack()
    if a is None:
        raise Check("no WEIGHTS_READY")
    if a["version"] != args.expect_version:
        raise Check("expected version %d, got %r" % (args.expect_version, a))
    print("ack: %r" % a)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--env")
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--acks", required=True)
    ap.add_argument("--run", default="it")
    ap.add_argument("--selroll", default="bin/selroll")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sc = sub.add_parser("scenario")
    sc.add_argument("--save")
    se = sub.add_parser("send")
    se.add_argument("file")
    se.add_argument("--expect-version", type=int, required=True)
    args = ap.parse_args()
    ctx = zmq.Context()
    try:
        if args.cmd == "scenario":
            if not args.env:
                ap.error("scenario needs --env")
            scenario(args, ctx)
        else:
            send(args, ctx)
    except Check as e:
        print("trainer_push.py: %s" % e, file=sys.stderr)
        return 1
    finally:
        ctx.destroy(linger=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
